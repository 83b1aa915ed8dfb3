"""Attention rollout on ``/api/llm/translate`` (``explain: ["rollout"]``), over HTTP: recomputed here
with numpy from the answer's own full causal matrix, layer by layer."""

from __future__ import annotations

import numpy as np
import pytest
from test_served import SOURCE, post


@pytest.mark.parametrize("layout", ["qwen2", "gpt2"])
def test_rollout_is_the_residual_mixed_product_of_the_full_matrices(server: str, layout: str) -> None:
    status, answer = post(f"{server}/api/llm/translate", {
        "model": f"en-de-{layout}", "text": SOURCE, "max_new_tokens": 6, "views": ["full"], "explain": ["rollout"],
    })  # fmt: skip
    assert status == 200, answer
    full = np.array(answer["attention"]["full"], dtype=np.float64)  # (L, H, n, n)
    first, (s0, s1) = answer["first_target_row"], answer["source_span"]
    flow = np.eye(full.shape[-1])
    got = answer["explanations"]["rollout"]
    for layer in range(full.shape[0]):
        flow = (0.5 * full[layer].mean(0) + 0.5 * np.eye(full.shape[-1])) @ flow
        source = flow[first:, s0:s1]
        share = source.sum(-1)
        np.testing.assert_allclose(got["source_share"][layer], share, atol=1e-5)
        np.testing.assert_allclose(got["target_source"][layer], source / share[:, None], atol=1e-5)
    assert len(got["target_source"][0]) == len(answer["target_token_ids"])


def test_rollout_without_attention_is_a_422(server: str) -> None:
    status, answer = post(f"{server}/api/llm/translate", {
        "model": "en-de-gpt2", "text": SOURCE, "attention": False, "explain": ["rollout"],
    })  # fmt: skip
    assert status == 422 and "explain needs the attention" in str(answer)
    status, answer = post(f"{server}/api/llm/translate", {"model": "en-de-gpt2", "text": SOURCE, "explain": ["alti"]})
    assert status == 422
