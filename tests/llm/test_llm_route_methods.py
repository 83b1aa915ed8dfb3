"""``/api/llm/translate`` offers every explanation method the common route has for decoder-only
models: value zeroing and ALTI, renamed as the views, equal ``/api/translate``'s (themselves
checked against independent implementations in test_alti.py and the registry's tests) for the
same output and the same heads switched off."""

from __future__ import annotations

import numpy as np
from test_served import SOURCE, post


def test_value_zeroing_and_alti_equal_the_common_routes(server: str) -> None:
    methods = ["value_zeroing", "alti", "rollout"]
    _, ref = post(f"{server}/api/llm/translate", {"model": "en-de-qwen2", "text": SOURCE, "max_new_tokens": 5,
                                                  "explain": methods, "disable_heads": [{"layer": 1, "head": 2}]})  # fmt: skip
    status, a = post(f"{server}/api/translate", {"model": "en-de-qwen2", "text": SOURCE, "max_length": 5, "beam_size": 1,
                                                 "explain": methods, "precision": 8,
                                                 "disable_heads": [{"kind": "decoder_self", "layer": 1, "head": 2}]})  # fmt: skip
    assert status == 200 and "explanations" in ref, ref
    assert a["llm"]["target_token_ids"] == ref["target_token_ids"]
    e, r = a["explanations"], ref["explanations"]
    t, s = len(ref["target_token_ids"]), len(ref["source_tokens"])
    assert np.array(r["value_zeroing"]["target_source"]).shape[1:] == (t, s)
    np.testing.assert_allclose(r["value_zeroing"]["target_source"], e["value_zeroing"]["cross"], atol=1e-6)
    for mine, common in (("target_source", "source"), ("target_target", "target"), ("source_share", "source_share"),
                         ("source_source", "encoder")):  # fmt: skip
        np.testing.assert_allclose(r["alti"][mine], e["alti"][common], atol=1e-6)
    status, err = post(f"{server}/api/llm/translate", {"model": "en-de-qwen2", "text": SOURCE, "explain": ["lrp"]})
    assert status == 422 and err["errors"][0]["loc"][:2] == ["body", "explain"], err
