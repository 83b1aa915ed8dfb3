"""Explanations on ``/api/llm/translate`` over HTTP: attention rollout recomputed here with numpy from
the answer's own full causal matrix, layer by layer; the norm per query head from the model's
value and output projections."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_served import SOURCE, post

from attnscope.llm.folder import load_llm_folder


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
    status, answer = post(f"{server}/api/llm/translate", {"model": "en-de-gpt2", "text": SOURCE, "explain": ["lrp"]})
    assert status == 422  # alti is offered now (test_llm_route_methods.py); an unknown method is not


@pytest.mark.parametrize("layout", ["qwen2", "gemma2"])
def test_norm_per_query_head_is_weight_times_the_value_vector_norm(server: str, llm_models: Path, layout: str) -> None:
    """Recomputed here from the value projection's outputs (a forward hook on each layer's ``v``)
    and the output projection's columns of one query head, by hand."""
    status, answer = post(f"{server}/api/llm/translate", {
        "model": f"en-de-{layout}", "text": SOURCE, "max_new_tokens": 5, "explain": ["norm"],
    })  # fmt: skip
    assert status == 200, answer
    model = load_llm_folder(llm_models / f"en-de-{layout}").model
    c = model.config
    captured: list[torch.Tensor] = []
    hooks = [layer.attn.v.register_forward_hook(lambda _m, _i, out: captured.append(out[0])) for layer in model.layers]
    ids = answer["prompt_token_ids"] + answer["target_token_ids"][:-1]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    s0, s1 = answer["source_span"]
    weights, got = answer["attention"]["target_source"], answer["explanations"]["norm"]
    group = c.heads // c.kv_heads
    for layer in range(c.layers):
        for head in range(c.heads):
            kv = head // group
            w_o = model.layers[layer].attn.o.weight.detach()[:, head * c.head_dim : (head + 1) * c.head_dim]
            sizes = [float((w_o @ captured[layer][j, kv * c.head_dim : (kv + 1) * c.head_dim]).norm()) for j in range(s0, s1)]
            np.testing.assert_allclose(got["value_norms"][layer][head], sizes, rtol=1e-4)
            expected = np.array(weights[layer][head]) * np.array(sizes)[None, :]
            np.testing.assert_allclose(got["target_source"][layer][head], expected, rtol=1e-4, atol=1e-6)
