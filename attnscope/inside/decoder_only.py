"""The logit lens, direct logit attribution and activation patching of a decoder-only LLM
translator (:class:`~attnscope.nn.decoder_only.DecoderOnlyLM`), on the tokens it wrote after its
prompt.

The traced pass reruns the model's own modules (norms, q/k/v projections, rotary positions,
grouped-query attention with soft-capping and sliding windows, feed-forward) teacher-forced over
prompt + output (but the output's last token), splitting only the attention: each query head's
output (B, N, H, Dh) is taken before the output projection W_O, where it can be read or replaced.
Its logits are the model's own (tested against ``transformers``).

Points of the lens: ``embed`` (token embeddings × Gemma's scale, + GPT-2's positions), then after
each layer's attention ``<layer>.attn`` and feed-forward ``<layer>.ff``. DLA splits the written
word's logit into the embeddings, each query head (through its W_O columns), each attention's
output bias and each feed-forward block, with the final norm's scale frozen; Gemma's norm *after*
the attention (``sandwich_norm``) has its root mean square frozen too, so its heads add up. With a
final soft-cap (Gemma 2) the parts add up to the logit *before* the cap (``cap · tanh(z / cap)``
is what the model writes)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import Tensor

from attnscope.decoding.output import DecodeStopped
from attnscope.inside.lens import DirectAttribution, Lens, read_lens
from attnscope.nn.decoder_only import DecoderOnlyLM, Layer, Norm, causal_mask

# (layer, heads (B, N, H, Dh)) -> the heads to use instead
LLMHeadEdit = Callable[[int, Tensor], Tensor]


@dataclass
class LLMTrace:
    """A traced pass over B rows of N positions: ``points`` the residual stream (B, N, D) at each
    of ``labels``; ``heads[layer]`` the query heads' outputs (B, N, H, Dh) before W_O;
    ``attn_out[layer]`` W_O's output (B, N, D) before any post-attention norm; ``parts[(layer,
    "attn"|"ff")]`` what was added to the residual stream; ``logits`` (B, N, V)."""

    labels: list[str] = field(default_factory=list)
    points: list[Tensor] = field(default_factory=list)
    heads: dict[int, Tensor] = field(default_factory=dict)
    attn_out: dict[int, Tensor] = field(default_factory=dict)
    parts: dict[tuple[int, str], Tensor] = field(default_factory=dict)
    logits: Tensor | None = None


def embed(model: DecoderOnlyLM, ids: Tensor) -> Tensor:
    """ids (B, N) from position 0 -> the residual entering layer 0 (B, N, D), as the model's forward."""
    x = model.embed(ids)
    if model.config.embed_scale != 1.0:
        x = x * torch.tensor(model.config.embed_scale, dtype=x.dtype)
    if model.positions is not None:
        x = x + model.positions(torch.arange(ids.size(1), device=ids.device))[None]
    return x


def _heads(layer: Layer, x: Tensor, positions: Tensor) -> Tensor:
    """x (B, N, D) the residual -> the query heads' outputs (B, N, H, Dh) before W_O."""
    attn = layer.attn
    q, k, v = attn._project(layer.attn_norm(x), positions)  # (B, H, N, Dh), (B, KVH, N, Dh) twice
    group = attn.heads // attn.kv_heads
    kr, vr = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, kr.transpose(2, 3)) * attn.scale  # (B, H, N, N)
    if attn.softcap is not None:
        scores = torch.tanh(scores / attn.softcap) * attn.softcap
    scores = scores.masked_fill(~causal_mask(positions, k.size(2), attn.window), -math.inf)
    weights = torch.softmax(scores.float(), dim=-1).type_as(q)
    return torch.matmul(weights, vr).transpose(1, 2)  # (B, N, H, Dh)


def forward(
    model: DecoderOnlyLM, x: Tensor, *, start: int = 0, edit: LLMHeadEdit | None = None,
    trace: LLMTrace | None = None,
) -> Tensor:
    """The layers from ``start`` on: x (B, N, D) the residual entering layer ``start`` (positions
    0..N-1) -> the logits (B, N, V). ``edit`` may replace each layer's heads."""
    positions = torch.arange(x.size(1), device=x.device)
    for i in range(start, len(model.layers)):
        layer = cast(Layer, model.layers[i])
        heads = _heads(layer, x, positions)
        if edit is not None:
            heads = edit(i, heads)
        out = layer.attn.o(heads.flatten(2))
        added = layer.post_attn_norm(out) if layer.post_attn_norm is not None else out
        x = x + added
        if trace is not None:
            trace.heads[i], trace.attn_out[i], trace.parts[(i, "attn")] = heads, out, added
            trace.labels.append(f"{i + 1}.attn")
            trace.points.append(x)
        h = layer.ff(layer.ff_norm(x))
        added = layer.post_ff_norm(h) if layer.post_ff_norm is not None else h
        x = x + added
        if trace is not None:
            trace.parts[(i, "ff")] = added
            trace.labels.append(f"{i + 1}.ff")
            trace.points.append(x)
    logits = model.logits(model.final_norm(x))
    if trace is not None:
        trace.logits = logits
    return logits


def run(model: DecoderOnlyLM, ids: Tensor, *, edit: LLMHeadEdit | None = None) -> LLMTrace:
    """The whole traced pass over ids (B, N) from position 0."""
    if ids.size(1) > model.config.max_positions:
        raise ValueError(f"{ids.size(1)} positions; the model has {model.config.max_positions}")
    trace = LLMTrace(labels=["embed"], points=[embed(model, ids)])
    forward(model, trace.points[0], edit=edit, trace=trace)
    return trace


def _norm_scale(norm: Norm, x: Tensor) -> tuple[Tensor, Tensor | None, bool]:
    """A norm applied to x (..., D) as the frozen linear map: (scale (..., D), bias, centred):
    norm(y) = (centred y) · scale + bias for y = x exactly, and linear in y with scale frozen."""
    xf = x.float()
    if norm.kind == "layer":
        sigma = (xf.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        return norm.weight.float() / sigma, norm.bias.float() if norm.bias is not None else None, True
    rms = (xf.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
    return (norm.offset + norm.weight.float()) / rms, None, False


def direct_attribution(model: DecoderOnlyLM, trace: LLMTrace, rows: slice, target: Tensor) -> DirectAttribution:
    """DLA of ``trace`` (one row) at positions ``rows`` (T of them) for the written ids target (T,)."""
    c = model.config
    unembed = (model.embed.weight if model.output is None else model.output.weight)[target].float()  # (T, D)
    scale, bias, centred = _norm_scale(model.final_norm, trace.points[-1][0, rows])
    g = unembed * scale  # (T, D)
    directions = g - g.mean(-1, keepdim=True) if centred else g
    const = (unembed * bias).sum(-1) if bias is not None else unembed.new_zeros(target.shape)
    how = ("layernorm: centred, σ frozen" if centred else "rmsnorm: root mean square frozen")
    if any(cast(Layer, layer).post_attn_norm is not None for layer in model.layers):
        how += "; the norm after each attention: root mean square frozen"
    if c.final_softcap is not None:
        how += f"; the parts add up to the logit before the final soft-cap ({c.final_softcap:g}·tanh(z/{c.final_softcap:g}))"
    heads, biases = [], []
    for i, layer in enumerate(cast(list[Layer], list(model.layers))):
        h = trace.heads[i][0, rows].float()  # (T, H, Dh)
        w_o = layer.attn.o.weight.float().view(c.d_model, h.size(1), h.size(2))  # (D, H, Dh)
        written = torch.einsum("thd,ehd->the", h, w_o)  # (T, H, D)
        b = layer.attn.o.bias.float() if layer.attn.o.bias is not None else written.new_zeros(c.d_model)
        post = layer.post_attn_norm
        if post is not None:  # Gemma: norm(Σ heads + b) with its rms frozen is Σ (head · s) + b · s
            s, _, _ = _norm_scale(cast(Norm, post), trace.attn_out[i][0, rows])
            written, b = written * s[:, None], b * s  # b: (T, D)
        heads.append((written * directions[:, None]).sum(-1).T)  # (H, T)
        biases.append((b * directions).sum(-1) if b.dim() == 2 else directions @ b)
    ff = torch.stack([(trace.parts[(i, "ff")][0, rows].float() * directions).sum(-1) for i in range(c.layers)])
    embeddings = (trace.points[0][0, rows].float() * directions).sum(-1)
    hidden = model.final_norm(trace.points[-1][0, rows]).float()
    logit = (hidden * unembed).sum(-1)  # before any soft-cap
    return DirectAttribution({"self": torch.stack(heads)}, {"self": torch.stack(biases)}, ff, embeddings,
                             const, logit, how)  # fmt: skip


def inspect(model: DecoderOnlyLM, prompt: list[int], target: list[int], *, k: int = 5) -> tuple[Lens, DirectAttribution]:
    """The lens and the DLA of ``target`` (the ids written after ``prompt``, teacher-forced)."""
    ids = torch.tensor([prompt + target[:-1]], device=model.device)
    rows, tgt = slice(len(prompt) - 1, None), torch.tensor(target, device=model.device)
    with torch.no_grad():
        trace = run(model, ids)
        stacked = torch.cat([p[:, rows] for p in trace.points])  # (P, T, D)
        found = read_lens(lambda x: model.logits(model.final_norm(x)), stacked, trace.labels, tgt, k=k)
        dla = direct_attribution(model, trace, rows, tgt)
    return found, dla


@dataclass(frozen=True)
class LLMPatchGrids:
    """Δ log p(target) (patched − clean), summed over the target or at one position.

    heads: (L, H) one query head's output (before W_O) from the corrupted run; positions: (L, P)
    the residual entering layer l at prompt position p from the corrupted run (row 0: the
    embeddings); clean, corrupted: (T,) log p of each target token on either run."""

    heads: Tensor
    positions: Tensor
    clean: Tensor
    corrupted: Tensor


def _target_lp(logits: Tensor, rows: slice, target: Tensor, position: int | None) -> Tensor:
    """logits (B, N, V) -> (B,) log p of target (T,) read at ``rows``, summed (or at ``position``)."""
    lp = torch.log_softmax(logits[:, rows].float(), -1)
    lp = lp.gather(-1, target.view(1, -1, 1).expand(lp.size(0), -1, 1))[..., 0]  # (B, T)
    return lp.sum(-1) if position is None else lp[:, position]


def patch(
    model: DecoderOnlyLM, clean: list[int], corrupted: list[int], target: list[int], *,
    position: int | None = None, should_stop: Callable[[], bool] | None = None,
) -> LLMPatchGrids:
    """The patching grids for the prompts ``clean`` and ``corrupted`` (equal lengths) and the
    ``target`` ids written after the clean one. Each batch holds one layer's every head (every
    prompt position) plus an unpatched row, the batch's baseline; ``should_stop`` is asked
    before each batch."""
    if len(clean) != len(corrupted):
        raise ValueError(f"the clean prompt has {len(clean)} tokens and the corrupted one {len(corrupted)}")
    if position is not None and not 0 <= position < len(target):
        raise ValueError(f"position {position} is outside the target's {len(target)} tokens")
    stop = should_stop or (lambda: False)
    device, n_prompt = model.device, len(clean)
    rows, tgt = slice(n_prompt - 1, None), torch.tensor(target, device=device)
    with torch.no_grad():
        runs = [run(model, torch.tensor([p + target[:-1]], device=device)) for p in (clean, corrupted)]
        head_rows, position_rows = [], []
        for layer in range(model.config.layers):
            if stop():
                raise DecodeStopped()
            donor = runs[1].heads[layer][0].transpose(0, 1)  # (H, N, Dh)
            idx = torch.arange(donor.size(0), device=device)

            def edit(i: int, heads: Tensor, layer: int = layer, donor: Tensor = donor, idx: Tensor = idx) -> Tensor:
                if i != layer:
                    return heads
                heads = heads.clone()
                heads[idx + 1, :, idx, :] = donor
                return heads

            x = runs[0].points[2 * layer].expand(donor.size(0) + 1, -1, -1)
            lp = _target_lp(forward(model, x, start=layer, edit=edit), rows, tgt, position)
            head_rows.append(lp[1:] - lp[0])
            x = runs[0].points[2 * layer].expand(n_prompt + 1, -1, -1).clone()
            at = torch.arange(n_prompt, device=device)
            x[at + 1, at] = runs[1].points[2 * layer][0, at]
            lp = _target_lp(forward(model, x, start=layer), rows, tgt, position)
            position_rows.append(lp[1:] - lp[0])
        both = [torch.log_softmax(r.logits[0, rows].float(), -1).gather(-1, tgt[:, None])[:, 0] for r in runs]  # type: ignore[index]
    return LLMPatchGrids(torch.stack(head_rows), torch.stack(position_rows), both[0], both[1])


def patch_cost(layers: int, heads: int, prompt: int, target: int) -> int:
    """Passes (two full runs, per layer one with every head and one with every prompt position)
    × the positions each runs: what admission counts."""
    return (2 + layers * (heads + 1) + layers * (prompt + 1)) * (prompt + target)
