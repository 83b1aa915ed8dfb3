"""The logit lens and direct logit attribution of a teacher-forced Transformer pass.

**Logit lens** (nostalgebraist 2020): the residual stream after the embeddings and after every
decoder sublayer, put through the model's final norm and output layer, read as a distribution over
the vocabulary. The last point is exactly the model's output.

**Direct logit attribution**: the chosen word's logit split into what each part wrote into the
residual stream. A pre-norm decoder's last residual is a sum: embeddings + positions, and per layer
each attention head's output through its slice of W_O, each attention's output bias and the
feed-forward block. The final LayerNorm ``(x - mean x) / σ(x) · γ + β`` is linear in x once σ is
fixed, so σ is frozen at its value on this pass (as TransformerLens does): the centering is
applied to every part, β (and an output bias) form one more part, and the parts add up to the
logit exactly. An RMSNorm freezes its root mean square the same way. Post-norm layouts renormalise
after every sublayer: there every sublayer's norm is frozen at its scale on this pass as well, so
it is linear too; each part is carried up through the later norms and their β are parts of their
own (``norm_bias``). The parts then add up to the logit exactly, but only through this
linearisation at this input (docs/inside.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from attnscope.inside import trace as tracing
from attnscope.inside.trace import NotApplicable, Trace
from attnscope.nn import layers
from attnscope.nn.layers import DecoderLayer
from attnscope.nn.t5_parts import RMSNorm
from attnscope.nn.transformer import Transformer


@dataclass(frozen=True)
class Lens:
    """The lens of one sentence of T target tokens at P points (``labels``).

    top_ids, top_probs: (P, T, k); rank, prob: (P, T) of the written word (rank 0 = top-1);
    emergence: per target position, the first point from which the written word is top-1 at every
    later point (None: not even at the last, which cannot happen for a greedy output)."""

    labels: list[str]
    top_ids: Tensor
    top_probs: Tensor
    rank: Tensor
    prob: Tensor
    emergence: list[int | None]
    log_probs: Tensor  # (T, V) the last point's: the model's output log-probabilities


def lens(model: Transformer, trace: Trace, target: Tensor, *, k: int = 5) -> Lens:
    """The lens of ``trace`` (one row) for target (T,) the written ids."""
    readout = lambda x: model.logits(model.decoder_norm(x))  # noqa: E731
    return read_lens(readout, torch.cat(trace.points, dim=0), trace.labels, target, k=k)


def read_lens(readout: Callable[[Tensor], Tensor], stacked: Tensor, labels: list[str], target: Tensor, *, k: int = 5) -> Lens:
    """The lens of the residual stream ``stacked`` (P, T, D) at the points ``labels``, read out
    by ``readout`` (the model's final norm and output layer: (P, T, D) -> (P, T, V)), for target
    (T,) the written ids."""
    log_probs = torch.log_softmax(readout(stacked).float(), dim=-1)  # (P, T, V)
    top = log_probs.topk(min(k, log_probs.size(-1)), dim=-1)
    chosen = log_probs.gather(-1, target.view(1, -1, 1).expand(log_probs.size(0), -1, 1))  # (P, T, 1)
    rank = (log_probs > chosen).sum(-1)  # (P, T)
    first = rank == 0
    emergence: list[int | None] = []
    for t in range(first.size(1)):
        column, start = first[:, t].tolist(), None
        for p in range(len(column) - 1, -1, -1):
            if not column[p]:
                break
            start = p
        emergence.append(start)
    return Lens(labels, top.indices, top.values.exp(), rank, chosen[..., 0].exp(), emergence, log_probs[-1])


@dataclass(frozen=True)
class DirectAttribution:
    """The written word's logit at each of T target positions, split into parts (each (T,) or
    (L, H, T) / (L, T)); ``logit`` is their sum, the model's own logit."""

    heads: dict[str, Tensor]  # "self" / "cross" -> (L, H, T) each head through its W_O slice
    attention_bias: dict[str, Tensor]  # "self" / "cross" -> (L, T) the output projection's bias
    feed_forward: Tensor  # (L, T)
    embeddings: Tensor  # (T,) token embeddings + positions
    final_bias: Tensor  # (T,) the final norm's β (plus the output bias, where the layout has one)
    logit: Tensor  # (T,) the logit the model computed
    norm: str  # how the final norm was handled
    norm_bias: Tensor | None = None  # (L, T) post-norm: each layer's sublayer norms' β (carried up)


def _directions(model: Transformer, final: Tensor, target: Tensor) -> tuple[Tensor, Tensor, str]:
    """final (T, D) the last residual -> per position the direction d (T, D) with part·d = the
    part's contribution to the written word's logit, the constant (T,), and how the norm froze."""
    c, norm = model.config, model.decoder_norm
    unembed = (model.embed.weight if c.tied_output else model.output.weight)[target].float()  # (T, D)
    if c.scale_output:
        unembed = unembed * c.d_model**-0.5
    const = model.output_bias[target] if c.output_bias else final.new_zeros(target.shape)
    if isinstance(norm, nn.LayerNorm):
        sigma = (final.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (T, 1)
        g = unembed * norm.weight if norm.weight is not None else unembed
        const = const + (unembed * norm.bias).sum(-1) if norm.bias is not None else const
        return (g - g.mean(-1, keepdim=True)) / sigma, const, "layernorm: centered, σ frozen"
    if isinstance(norm, RMSNorm):
        rms = (final.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
        return unembed * norm.weight / rms, const, "rmsnorm: root mean square frozen"
    if isinstance(norm, nn.Identity):
        return unembed, const, "no final norm"
    raise NotApplicable(f"direct logit attribution does not know the final norm {type(norm).__name__}")


def _through_norm(norm: nn.Module, y: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """A post-norm sublayer's norm, applied to y (T, D), frozen at its scale on this pass:
    norm(y)·d = y·d' + c exactly, and linear in y. Returns d' (T, D) and c (T,)."""
    if isinstance(norm, nn.LayerNorm):
        sigma = (y.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        g = d * norm.weight / sigma if norm.weight is not None else d / sigma
        c = (d * norm.bias).sum(-1) if norm.bias is not None else d.new_zeros(d.size(0))
        return g - g.mean(-1, keepdim=True), c
    if isinstance(norm, RMSNorm):
        return d * norm.weight / (y.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt(), d.new_zeros(d.size(0))
    raise NotApplicable(f"direct logit attribution does not know the norm {type(norm).__name__}")


def _sublayer_directions(
    model: Transformer, trace: Trace, final: Tensor
) -> tuple[dict[tuple[int, str], Tensor], Tensor, Tensor | None]:
    """Per decoder sublayer the direction (T, D) its output is read along, the embeddings', and
    (post-norm) each layer's norms' β as parts (L, T). Pre-norm: every direction is ``final``.
    Post-norm: walking back from the top, each sublayer's norm is frozen at its scale on this
    pass (:func:`_through_norm`) and the direction carried through it."""
    layers_n = len(model.decoder_layers)
    if model.config.pre_norm:
        return {(i, k): final for i in range(layers_n) for k in tracing.SUBLAYERS}, final, None
    directions: dict[tuple[int, str], Tensor] = {}
    norm_bias = final.new_zeros(layers_n, final.size(0))
    d, point = final, 3 * layers_n
    for i in range(layers_n - 1, -1, -1):
        w = layers.general(cast(DecoderLayer, model.decoder_layers[i]))
        for kind, norm in (("ff", w.norm_ff), ("cross", w.norm_cross), ("self", w.norm_self)):
            y = (trace.points[point - 1][0] + trace.parts[(i, kind)][0]).float()  # the norm's input
            d, c = _through_norm(norm, y, d)
            directions[(i, kind)] = d
            norm_bias[i] += c
            point -= 1
    return directions, d, norm_bias


def direct_attribution(model: Transformer, trace: Trace, target: Tensor) -> DirectAttribution:
    """DLA of ``trace`` (one row) for the written ids target (T,). Post-norm layouts: every
    sublayer's norm is frozen at its scale on this pass too, and their β are parts."""
    final, const, how = _directions(model, trace.points[-1][0].float(), target)  # (T, D)
    directions, embed_dir, norm_bias = _sublayer_directions(model, trace, final)
    if norm_bias is not None:
        how += "; post-norm: every sublayer's LayerNorm σ frozen too, its β a part (norm_bias)"
    layers_n = len(model.decoder_layers)
    heads, biases = {}, {}
    for kind in ("self", "cross"):
        rows, bias_rows = [], []
        for i in range(layers_n):
            layer = model.decoder_layers[i]
            d = directions[(i, kind)]
            proj: nn.Linear = getattr(layer, f"{kind}_attn").out_proj
            h = trace.heads[(i, kind)][0]  # (T, H, Dh)
            w_o = proj.weight.view(proj.weight.size(0), h.size(1), h.size(2))  # (D, H, Dh)
            written = torch.einsum("thd,ehd->the", h.float(), w_o.float())  # (T, H, D)
            rows.append((written * d[:, None]).sum(-1).T)  # (H, T)
            b = proj.bias if proj.bias is not None else d.new_zeros(d.size(1))
            bias_rows.append(d @ b.float())  # (T,)
        heads[kind], biases[kind] = torch.stack(rows), torch.stack(bias_rows)
    ff = torch.stack([(trace.parts[(i, "ff")][0].float() * directions[(i, "ff")]).sum(-1) for i in range(layers_n)])
    embeddings = (trace.points[0][0].float() * embed_dir).sum(-1)
    logit = trace.logits[0].float().gather(-1, target[:, None])[:, 0] if trace.logits is not None else None
    assert logit is not None
    return DirectAttribution(heads, biases, ff, embeddings, const.float(), logit, how, norm_bias)


def total(parts: DirectAttribution) -> Tensor:
    """(T,) the sum of every part: equals ``parts.logit`` (up to float rounding)."""
    summed = parts.embeddings + parts.final_bias + parts.feed_forward.sum(0)
    for kind in parts.heads:
        summed = summed + parts.heads[kind].sum((0, 1)) + parts.attention_bias[kind].sum(0)
    return summed + parts.norm_bias.sum(0) if parts.norm_bias is not None else summed


def inspect(model: Transformer, source: list[int], target: list[int], *, k: int = 5) -> tuple[Lens, DirectAttribution | None]:
    """The lens and (pre-norm models) the DLA of ``target`` (ids ending in </s>) given ``source``."""
    model = tracing.require_transformer(model)
    src, tgt = torch.tensor([source], device=model.device), torch.tensor([target], device=model.device)
    with torch.no_grad():
        _, trace = tracing.run(model, src, tgt)
        found = lens(model, trace, tgt[0], k=k)
        dla = direct_attribution(model, trace, tgt[0])
    return found, dla
