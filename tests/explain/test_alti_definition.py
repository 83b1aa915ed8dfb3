"""Issue 45.7: ALTI+ as its authors define it (Ferrando et al. 2022, "Towards Opening the Black Box
of Neural Machine Translation: Source and Target Contributions to the Model's Output", and ALTI,
"Measuring the Mixing of Contextual Information in the Transformer"): the contribution of token
j to position i is max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), normalised, where y_i is the attention
block's real output (the output projection's bias included; post-norm, after the layer norm,
with its β) and T_i(x_j) the part of it token j brings. Written here from the paper, with plain
tensor algebra on the model's weights; compared with attnscope.explain.alti's first encoder layer
and first decoder self-attention layer."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from attnscope.explain.alti import alti, contributions, token_vectors
from attnscope.explain.trace import trace
from attnscope.nn.config import config_from_dict
from attnscope.nn.factory import build_model
from attnscope.nn.transformer import Transformer

SRC = [5, 6, 7, 8, 9, 3]
TGT = [10, 11, 12, 13, 3]


def model_with_biases(pre_norm: bool) -> Transformer:
    torch.manual_seed(3)
    config = config_from_dict({
        "architecture": "transformer", "vocab_size": 40, "dropout": 0.0, "d_model": 16, "heads": 2,
        "ff_dim": 32, "encoder_layers": 2, "decoder_layers": 2, "pre_norm": pre_norm,
    })  # fmt: skip
    model = build_model(config).eval()
    with torch.no_grad():  # biases and β large enough to matter (a fresh model's are 0)
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
    assert isinstance(model, Transformer)
    return model


def paper_contributions(attn: nn.Module, norm: nn.LayerNorm, x: Tensor, pre_norm: bool, causal: bool) -> Tensor:
    """ALTI of one self-attention block from its weights: x (S, D) the block's input -> (S, S)."""
    s, d = x.shape
    h = attn.heads
    dh = d // h
    inp = nn.functional.layer_norm(x, (d,), norm.weight, norm.bias, norm.eps) if pre_norm else x
    q = (inp @ attn.q_proj.weight.T + attn.q_proj.bias).view(s, h, dh).transpose(0, 1)
    k = (inp @ attn.k_proj.weight.T + attn.k_proj.bias).view(s, h, dh).transpose(0, 1)
    v = (inp @ attn.v_proj.weight.T + attn.v_proj.bias).view(s, h, dh).transpose(0, 1)  # (H, S, Dh)
    scores = q @ k.transpose(1, 2) / math.sqrt(dh)
    if causal:
        scores = scores.masked_fill(torch.ones(s, s).triu(1).bool(), float("-inf"))
    alpha = scores.softmax(-1)  # (H, S, S)
    w_o = attn.out_proj.weight.view(d, h, dh)  # (D, H, Dh)
    f = torch.einsum("hjc,ehc->hje", v, w_o)  # (H, S, D): W_O^h (W_V^h x_j + b_V^h)
    t = torch.einsum("hij,hje->ije", alpha, f)  # (S, S, D): T_i(x_j) before the residual
    t = t + torch.diag_embed(torch.ones(s))[..., None] * x[:, None, :]  # + x_i at j = i
    pre = t.sum(1) + attn.out_proj.bias  # x_i + attention output: what the residual adds up to
    if pre_norm:
        y = pre
    else:  # y = LN(pre); T through the norm's linear part with position i's statistics
        sigma = (pre.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        y = nn.functional.layer_norm(pre, (d,), norm.weight, norm.bias, norm.eps)
        t = (t - t.mean(-1, keepdim=True)) / sigma[:, None] * norm.weight
    c = (y.abs().sum(-1)[:, None] - (y[:, None] - t).abs().sum(-1)).clamp(min=0)
    return c / c.sum(-1, keepdim=True)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_alti_matches_the_papers_definition(pre_norm: bool) -> None:
    model = model_with_biases(pre_norm)
    with torch.no_grad():
        traced = trace(model, SRC, TGT)
        found = alti(traced)
        first = traced.encoder[0]
        encoder = paper_contributions(first.attn, first.res.norm, traced.encoder_inputs[0][0], pre_norm, False)
        own = traced.decoder_self[0]
        decoder = paper_contributions(own.attn, own.res.norm, traced.decoder_inputs[0][0], pre_norm, True)
        torch.testing.assert_close(found.encoder[0], encoder, atol=1e-5, rtol=1e-4)
        # the decoder's first self-attention block (causal), by the same function alti() composes
        torch.testing.assert_close(contributions(token_vectors(own, own=True), own.out[0]), decoder, atol=1e-5, rtol=1e-4)
        # the biases matter here: the definition without them (the sum of the vectors) is off
        plain = contributions(token_vectors(first, own=True))
        assert (plain - encoder).abs().max() > 1e-3
