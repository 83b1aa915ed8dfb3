"""The explanation-method registry: the shipped methods in catalog order, which families each
runs on (and why not), names and answer fields that cannot clash, and prices that hold the
formulas admission charged before the registry (docs/api.md, *Cost*)."""

from __future__ import annotations

import dataclasses

import pytest

from attnscope.explain import registry
from attnscope.explain.norm import NO_ATTENTION
from attnscope.testing import tiny_config


def test_the_shipped_methods_in_catalog_order() -> None:
    assert registry.names()[:4] == ("norm", "rollout", "value_zeroing", "alti")


def test_which_families_each_method_runs_on() -> None:
    transformer, rnn, none = tiny_config("transformer", None, 40), tiny_config("rnn", "additive", 40), tiny_config("rnn", "none", 40)
    assert registry.applicable_to(transformer)[:4] == ("norm", "rollout", "value_zeroing", "alti")
    assert registry.applicable_to(rnn) == ("norm",)
    assert registry.applicable_to(none) == ()
    assert registry.method("norm").why_not(none) == NO_ATTENTION
    assert "recurrent state" in (registry.method("alti").why_not(rnn) or "")


def test_unknown_names_and_clashing_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown explanation method 'lime'; choose from norm, rollout"):
        registry.method("lime")
    norm = registry.method("norm")
    with pytest.raises(ValueError, match="the answer field 'norm' of 'twin' is taken \\(norm\\)"):
        registry.register(dataclasses.replace(norm, name="twin"))
    with pytest.raises(ValueError, match="lowercase"):
        registry.register(dataclasses.replace(norm, name="Bad Name", fields=()))
    assert "twin" not in registry.names()


@pytest.mark.parametrize(("s", "t"), [(1, 1), (7, 9), (16, 3)])
def test_prices_hold_the_formulas(s: int, t: int) -> None:
    config = tiny_config("transformer", None, 40)
    enc, dec = config.encoder_layers, config.decoder_layers
    trace = enc * s + dec * t
    assert registry.cost(config, s, t, asked=()) == 0
    assert registry.cost(config, s, t, asked=("norm", "rollout")) == trace
    assert registry.cost(config, s, t, asked=("value_zeroing",)) == trace + enc * s * (s + 1) + dec * t * (t + s + 2)
    assert registry.cost(config, s, t, asked=("alti",)) == trace + enc * s * s + dec * t * (t + s + 1)
    rnn = tiny_config("rnn", "additive", 40)
    assert registry.cost(rnn, s, t, asked=("norm", "alti", "value_zeroing")) == s + t  # one layer; the rest not computed
