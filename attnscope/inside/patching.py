"""Activation patching between a clean and a corrupted source of equal length (Vig et al. 2020,
Meng et al. 2022): run both teacher-forced on the clean target, then rerun the clean pass with one
piece taken from the corrupted run, and report the change in the target's log-probability.

Two grids: per decoder layer and head (self- and cross-attention), the head's output before W_O
replaced; per encoder layer boundary and source position, the encoder's residual stream at that
position replaced. Each batch holds every head of one layer (every position of one boundary) plus
an unpatched row, whose log-probabilities are the baseline of that batch: identical inputs give
exactly zero, and float rounding of batched products never shows up as an effect."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.decoding.output import DecodeStopped
from attnscope.inside import trace as tracing
from attnscope.inside.trace import Trace
from attnscope.nn.transformer import Transformer


@dataclass(frozen=True)
class PatchGrids:
    """Changes in log p(target) (patched − clean), summed over the target positions or at one.

    heads: "self" / "cross" -> (L_dec, H); positions: (L_enc + 1, S), row i the residual entering
    encoder layer i (row 0: the embeddings; the last row: the encoder's output before its final
    norm); clean, corrupted: (T,) log p of each target token on either run."""

    heads: dict[str, Tensor]
    positions: Tensor
    clean: Tensor
    corrupted: Tensor
    position: int | None


def _target_log_probs(logits: Tensor, target: Tensor, position: int | None) -> Tensor:
    """logits (B, T, V), target (T,) -> (B,) log p of the target summed over T (or at ``position``)."""
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, target.view(1, -1, 1).expand(logits.size(0), -1, 1))[..., 0]
    return lp.sum(-1) if position is None else lp[:, position]


def _head_grid(
    model: Transformer, memory: Tensor, src_mask: Tensor, runs: tuple[Trace, Trace], target: Tensor,
    *, kind: str, position: int | None, stop: Callable[[], bool],
) -> Tensor:
    """(L, H) patching each ``kind`` head of each decoder layer from the corrupted run."""
    clean, corrupted = runs
    rows = []
    for layer in range(len(model.decoder_layers)):
        if stop():
            raise DecodeStopped()
        donor = corrupted.heads[(layer, kind)][0].transpose(0, 1)  # (H, T, Dh)
        h = donor.size(0)
        x = clean.points[3 * layer].expand(h + 1, -1, -1)  # row 0 unpatched

        def edit(i: int, k: str, heads: Tensor, layer: int = layer, donor: Tensor = donor) -> Tensor:
            if i != layer or k != kind:
                return heads
            heads = heads.clone()
            idx = torch.arange(donor.size(0), device=donor.device)
            heads[idx + 1, :, idx, :] = donor
            return heads

        logits = tracing.decode(model, memory, src_mask, x, start=layer, edit=edit)
        lp = _target_log_probs(logits, target, position)
        rows.append(lp[1:] - lp[0])
    return torch.stack(rows)


def _position_grid(
    model: Transformer, src: Tensor, runs: tuple[Trace, Trace], target: Tensor,
    *, position: int | None, stop: Callable[[], bool],
) -> Tensor:
    """(L_enc + 1, S) patching the encoder residual at each boundary and source position."""
    clean, corrupted = runs
    s = src.size(1)
    embedded = clean.points[0].expand(s + 1, -1, -1)
    batch_src = src.expand(s + 1, -1)
    rows = []
    for boundary, (mine, theirs) in enumerate(zip(clean.encoder, corrupted.encoder, strict=True)):
        if stop():
            raise DecodeStopped()
        x = mine.expand(s + 1, -1, -1).clone()  # row 0 unpatched, row p + 1 patched at p
        idx = torch.arange(s, device=src.device)
        x[idx + 1, idx] = theirs[0, idx]
        memory = tracing.encode(model, batch_src, start=boundary, x=x)
        logits = tracing.decode(model, memory, model.source_mask(batch_src), embedded)
        lp = _target_log_probs(logits, target, position)
        rows.append(lp[1:] - lp[0])
    return torch.stack(rows)


def patch(
    model: Transformer, clean: list[int], corrupted: list[int], target: list[int], *,
    position: int | None = None, should_stop: Callable[[], bool] | None = None,
) -> PatchGrids:
    """The patching grids for source ids ``clean`` and ``corrupted`` (equal lengths) and target
    ids ending in </s>. ``should_stop`` is asked before each batch (True raises
    :class:`~attnscope.decoding.output.DecodeStopped`)."""
    model = tracing.require_transformer(model)
    if len(clean) != len(corrupted):
        raise ValueError(f"the clean source has {len(clean)} tokens and the corrupted one {len(corrupted)}")
    if position is not None and not 0 <= position < len(target):
        raise ValueError(f"position {position} is outside the target's {len(target)} tokens")
    stop = should_stop or (lambda: False)
    device = model.device
    src, tgt = torch.tensor([clean], device=device), torch.tensor(target, device=device)
    with torch.no_grad():
        memory, clean_run = tracing.run(model, src, tgt[None])
        _, corrupted_run = tracing.run(model, torch.tensor([corrupted], device=device), tgt[None])
        runs = (clean_run, corrupted_run)
        src_mask = model.source_mask(src)
        heads = {
            kind: _head_grid(model, memory, src_mask, runs, tgt, kind=kind, position=position, stop=stop)
            for kind in ("self", "cross")
        }
        positions = _position_grid(model, src, runs, tgt, position=position, stop=stop)
        both = [torch.log_softmax(r.logits[0].float(), -1).gather(-1, tgt[:, None])[:, 0] for r in runs]  # type: ignore[index]
    return PatchGrids(heads, positions, both[0], both[1], position)


def patched_logits(model: Transformer, source: Tensor, target: Tensor, edit: tracing.HeadEdit) -> Tensor:
    """source (B, S), target (B, T) -> the logits (B, T, V) of a pass with ``edit`` applied to the
    heads (a helper for checks and notebooks)."""
    with torch.no_grad():
        memory = tracing.encode(model, source)
        x = model._embed(tracing.target_input(model, target))
        return tracing.decode(model, memory, model.source_mask(source), x, edit=edit)
