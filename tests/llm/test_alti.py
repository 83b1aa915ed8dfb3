"""ALTI for decoder-only models against an independent implementation written here on Hugging
Face's own modules (the originals the tiny models were imported from): each layer's token
vectors T_i(x_j) from its v_proj/o_proj, its attention weights and (Gemma) its post-attention
norm's scale fixed by the real attention output, contributions by L1 distance to the real
residual stream after attention, composed up the layers. Served answers and fetch-by-id agree."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_served import SOURCE, post

from attnscope.explain.alti import decoder_only_alti
from attnscope.explain.registry import Sentence
from attnscope.llm.folder import load_llm_folder


def _hf_alti(folder: Path, ids: list[int], layout: str) -> torch.Tensor:
    """(L, n, n) ALTI after each layer of the original over ``ids``, in float64."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float64).eval()
    layers = hf.transformer.h if layout == "gpt2" else hf.model.layers
    caught: list[dict[str, Any]] = [{} for _ in layers]
    hooks = []

    def first(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        return (args[0] if args else kwargs["hidden_states"])[0]

    for i, layer in enumerate(layers):
        attention = layer.attn if layout == "gpt2" else layer.self_attn
        hooks.append(layer.register_forward_pre_hook(
            lambda _m, args, kwargs, i=i: caught[i].update(x=first(args, kwargs)), with_kwargs=True))  # fmt: skip
        hooks.append(attention.register_forward_pre_hook(
            lambda _m, args, kwargs, i=i: caught[i].update(h=first(args, kwargs)), with_kwargs=True))  # fmt: skip
        hooks.append(attention.register_forward_hook(
            lambda _m, _a, out, i=i: caught[i].update(out=out[0][0], weights=out[1][0])))  # fmt: skip
    with torch.no_grad():
        hf(input_ids=torch.tensor([ids]), output_attentions=True)
        flow = None
        rows = []
        for layer, c in zip(layers, caught, strict=True):
            n, heads = c["x"].size(0), c["weights"].size(0)
            if layout == "gpt2":  # fused c_attn and Conv1D c_proj (y = x W + b, W: (in, out))
                d = c["x"].size(-1)
                dh = d // heads
                v = layer.attn.c_attn(c["h"])[:, 2 * d :].view(n, heads, dh).transpose(0, 1)
                w_o = layer.attn.c_proj.weight.T  # (D, H·Dh)
            else:
                attn = layer.self_attn
                dh = attn.head_dim
                v = attn.v_proj(c["h"]).view(n, -1, dh).transpose(0, 1)  # (KVH, n, Dh)
                v = v.repeat_interleave(heads // v.size(0), dim=0)
                w_o = attn.o_proj.weight  # (D, H·Dh)
            f = torch.stack([v[h] @ w_o[:, h * dh : (h + 1) * dh].T for h in range(heads)])  # (H, n, D)
            moved = torch.einsum("hij,hjd->ijd", c["weights"], f)
            if layout == "gemma2":  # the post-attention norm, linear with the real output's rms
                post = layer.post_attention_layernorm
                scale = (1.0 + post.weight) / (c["out"].pow(2).mean(-1, keepdim=True) + post.eps).sqrt()
                moved, added = moved * scale[:, None], post(c["out"])
            else:
                added = c["out"]
            y = c["x"] + added  # the real residual stream after attention
            moved[range(n), range(n)] += c["x"]
            contribution = (y.abs().sum(-1)[:, None] - (y[:, None] - moved).abs().sum(-1)).clamp(min=0)
            contribution = contribution / contribution.sum(-1, keepdim=True)
            flow = contribution if flow is None else contribution @ flow
            rows.append(flow)
    for hook in hooks:
        hook.remove()
    return torch.stack(rows)


# GQA; value bias, 5/1 heads; post-attention norm, soft-cap; LayerNorm, output bias, fused c_attn
@pytest.mark.parametrize("layout", ["llama", "qwen2", "gemma2", "gpt2"])
def test_alti_equals_an_independent_implementation_on_the_original(
    server: str, llm_sources: dict[str, Path], llm_models: Path, layout: str
) -> None:
    status, a = post(f"{server}/api/translate", {"model": f"en-de-{layout}", "text": SOURCE, "beam_size": 1,
                                                 "max_length": 4, "explain": ["alti"], "precision": 8})  # fmt: skip
    assert status == 200, a
    ctx, served = a["llm"], a["explanations"]["alti"]
    (s0, s1), first, prompt, out = ctx["source_span"], ctx["first_target_row"], ctx["prompt_token_ids"], ctx["target_token_ids"]
    theirs = _hf_alti(llm_sources[layout], (prompt + out)[:-1], layout)  # (L, n, n)
    model = load_llm_folder(llm_models / f"en-de-{layout}").model.double()
    ours = decoder_only_alti(Sentence(model, prompt, out, source_span=(s0, s1)))
    # float64 models; the shared contributions() measures its distances in float32 (~2e-6 apart)
    np.testing.assert_allclose(ours.source.numpy(), theirs[:, first:, s0:s1].numpy(), atol=1e-5)
    np.testing.assert_allclose(ours.target.numpy(), theirs[:, first:, first:].numpy(), atol=1e-5)
    np.testing.assert_allclose(ours.encoder.numpy(), theirs[:, s0:s1, s0:s1].numpy(), atol=1e-5)
    np.testing.assert_allclose(theirs.sum(-1).numpy(), 1.0, atol=1e-9)  # every row's contributions sum to 1
    np.testing.assert_allclose(served["source"], theirs[:, first:, s0:s1].numpy(), atol=1e-4)  # float32, served
    np.testing.assert_allclose(served["source_share"], theirs[-1, first:, s0:s1].sum(-1).numpy(), atol=1e-4)


def test_alti_is_listed_and_fetched_by_id(server: str) -> None:
    with urllib.request.urlopen(f"{server}/api/explain-methods", timeout=30) as response:
        methods = {m["name"]: m["families"]["decoder_only"] for m in json.loads(response.read())["methods"]}
    assert methods["alti"] is None  # runs: no reason given
    body = {"model": "en-de-llama", "text": SOURCE, "beam_size": 1, "max_length": 4, "precision": 8}
    _, inline = post(f"{server}/api/translate", body | {"explain": ["alti"]})
    _, kept = post(f"{server}/api/translate", body | {"attention": "on_demand"})
    base = f"{server}/api/attention/{kept['attention_id']}"
    for kind, part in (("cross", "source"), ("decoder_self", "target"), ("encoder_self", "encoder")):
        with urllib.request.urlopen(f"{base}/{kind}/2?method=alti&precision=8", timeout=60) as response:
            np.testing.assert_allclose(json.loads(response.read()), inline["explanations"]["alti"][part][2], atol=1e-6)
