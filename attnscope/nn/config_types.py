"""Type and range checks of a config's fields, from the config dataclass's own annotations.

``config.json`` is read from disk, where anything can be written: ``"emb_dim": "256"`` or
``-5`` would otherwise reach ``torch.nn.Embedding`` and fail there with a raw torch message (or,
for a negative size, not at all until a later shape error). Checked here, before the dataclass
is built, each wrong field gets one message naming it, its value and what it must be.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Literal, get_args, get_origin

# int fields that may be 0 (token ids); every other int field is a size or a count: at least 1
ZERO_ALLOWED_SUFFIXES = ("_id",)


def check_types(cls: type, data: dict[str, Any]) -> None:
    """ValueError naming every field of ``data`` whose value does not fit ``cls``'s annotation:
    ``int`` (a whole number, not a bool; sizes and counts >= 1, ids >= 0), ``float`` (a finite
    number >= 0), ``bool``, ``str``, a ``Literal``'s values, and ``X | None``."""
    hints = typing.get_type_hints(cls)
    problems = []
    for field in dataclasses.fields(cls):
        if field.name in data:
            problem = _problem(field.name, data[field.name], hints[field.name])
            if problem:
                problems.append(f"{field.name}: {problem} (got {data[field.name]!r})")
    if problems:
        raise ValueError("; ".join(problems))


def _problem(name: str, value: Any, hint: Any) -> str | None:
    args = get_args(hint)
    if get_origin(hint) is Literal:
        return None if value in args else f"must be one of {', '.join(map(repr, args))}"
    if type(None) in args:  # X | None
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be a whole number"
        least = 0 if name.endswith(ZERO_ALLOWED_SUFFIXES) else 1
        return None if value >= least else f"must be at least {least}"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return "must be a finite number"
        return None if value >= 0 else "must not be negative"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    return None
