"""``DecodeKw`` (the options by keyword, ``beam_search(model, src, beam_size=3)``) is
``DecodeOptions`` field for field, with the same types: a new option written in one and not the
other fails here, not at a caller's typo (docs/decoding.md, "Adding an option")."""

from __future__ import annotations

import dataclasses
import typing

from attnscope.decoding import plan
from attnscope.decoding.plan import DecodeKw, DecodeOptions, options_of


def test_the_keywords_are_the_options_field_for_field() -> None:
    hints = typing.get_type_hints(DecodeOptions, vars(plan))
    fields = {f.name: hints[f.name] for f in dataclasses.fields(DecodeOptions)}
    assert typing.get_type_hints(DecodeKw, vars(plan)) == fields
    assert DecodeKw.__optional_keys__ == frozenset(fields)


def test_keywords_replace_the_options_they_name() -> None:
    base = DecodeOptions(beam_size=3, need_weights=False)
    assert options_of(base, {"beam_size": 1}) == dataclasses.replace(base, beam_size=1)
    assert options_of(None, {}) == DecodeOptions()
