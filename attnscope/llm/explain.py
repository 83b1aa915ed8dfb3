"""Explanations of a decoder-only answer beyond the raw weights, cut like the views
(:mod:`attnscope.llm.views`): attention rollout (Abnar & Zuidema 2020) over the one causal stack,
and the norm per query head (Kobayashi et al. 2020).

**norm**: query head h's output at position i is Σ_j α_ij f_h(x_j) with f_h(x_j) = v_j W_O^h,
v_j the values of h's *shared* key/value head (grouped-query attention) and W_O^h h's columns of
the output projection (its bias, shared by all heads, left out; Gemma's post-attention norm,
applied after the sum, too). ``target_source`` [L][H][T][S] is α_ij ‖f_h(x_j)‖ (not
renormalised: what token j actually moves), ``value_norms`` [L][H][S] the ‖f_h(x_j)‖ of the
source tokens alone. The values come from one teacher-forced pass over the positions the
answer's attention covers, with the same heads switched off.

Each layer's weights, averaged over its query heads, are mixed with the identity for the
residual, Ã_l = 0.5·Ā_l + 0.5·I, and multiplied up the stack, R_l = Ã_l · R_{l-1} (R_0 = Ã_0),
over every position the model ran (prompt + output but the last). Row i of R_l says how much of
position i after layer l came from each input token. ``target_source`` is the output rows over
the source's prompt tokens, renormalised to sum to 1; ``source_share`` is each such row's mass
on the source before renormalising (the rest came from the instruction, the first token and the
output so far). Rollout is per layer, not per head: the head average is its definition.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor

from attnscope.llm.views import Views
from attnscope.nn.decoder_only import DecoderOnlyLM, Layer

METHODS: tuple[str, ...] = ("rollout", "norm")
# Why a registered method has no decoder-only definition (docs/llm.md); none now: value zeroing
# and ALTI run through the explanation registry (attnscope.explain.value_zeroing, .alti).
UNAVAILABLE: dict[str, str] = {}


def rollout(full: Tensor) -> Tensor:
    """full: (L, H, n, n) causal attention -> (L, n, n) the rollout after each layer."""
    mean = full.float().mean(1)  # (L, n, n)
    eye = torch.eye(mean.size(-1), dtype=mean.dtype, device=mean.device)
    layers, flow = [], None
    for layer in mean:
        mixed = 0.5 * layer + 0.5 * eye
        flow = mixed if flow is None else mixed @ flow
        layers.append(flow)
    return torch.stack(layers)


@torch.inference_mode()
def value_norms(model: DecoderOnlyLM, ids: list[int]) -> Tensor:
    """(L, H, n) ‖f_h(x_j)‖ of every query head h and position j of ``ids`` (module docstring)."""
    c = model.config
    out = model(torch.tensor([ids], device=model.device), need_weights=False)
    group = c.heads // c.kv_heads
    norms = []
    for layer, values in zip(model.layers, out.cache.values, strict=True):
        v = values[0].float().repeat_interleave(group, dim=0)  # (H, n, Dh)
        w_o = cast(Layer, layer).attn.o.weight.float().view(c.d_model, c.heads, c.head_dim)  # (D, H, Dh)
        norms.append(torch.einsum("hnd,Dhd->hnD", v, w_o).norm(dim=-1))  # (H, n)
    return torch.stack(norms)


def source_rollout(views: Views, span: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """(``target_source`` (L, T, S), rows renormalised to sum to 1; ``source_share`` (L, T), each
    row's rollout mass on the source before renormalising)."""
    rolled = rollout(views.full)
    source = rolled[:, views.first_target_row :, span[0] : span[1]]  # (L, T, S)
    share = source.sum(-1)
    return source / share.clamp(min=1e-12)[..., None], share


def source_norms(views: Views, span: tuple[int, int], model: DecoderOnlyLM, ids: list[int]) -> tuple[Tensor, Tensor]:
    """(``target_source`` (L, H, T, S) α_ij ‖f_h(x_j)‖, ``value_norms`` (L, H, S) ‖f_h(x_j)‖ of the
    source tokens); ``ids``: the positions the views' attention covers."""
    sizes = value_norms(model, ids)[..., span[0] : span[1]].to(views.target_source.device)  # (L, H, S)
    return views.target_source.float() * sizes[:, :, None, :], sizes


def explanations(views: Views, span: tuple[int, int], methods: tuple[str, ...], *,
                 model: DecoderOnlyLM | None = None, ids: list[int] | None = None) -> dict[str, Any]:  # fmt: skip
    """The answer's ``explanations``: ``rollout`` {``target_source`` [L][T][S] (rows sum to 1),
    ``source_share`` [L][T]}; ``norm`` (needs ``model`` and the ``ids`` the attention covers)
    {``target_source`` [L][H][T][S], ``value_norms`` [L][H][S]}."""
    out: dict[str, Any] = {}
    if "norm" in methods:
        assert model is not None and ids is not None
        weighted, sizes = source_norms(views, span, model, ids)
        out["norm"] = {"target_source": weighted.tolist(), "value_norms": sizes.tolist()}
    if "rollout" in methods:
        source, share = source_rollout(views, span)
        out["rollout"] = {"target_source": source.tolist(), "source_share": share.tolist()}
    return out
