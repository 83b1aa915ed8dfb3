"""Activation patching for RNN encoder–decoders (:class:`~attnscope.nn.rnn.RNNSeq2Seq`): the
attention's context vector of one decoder step taken from a second source.

An RNN has no residual stream and no heads, so the Transformer grids do not apply (an RNN's one
attention feeds a recurrent state, not a sum of layer outputs). What it has is the context vector
c_t = Σ_i α_t,i h_i, the only way the source reaches the decoder at step t (besides the first
state). Both sources are read teacher-forced on the same target; then the clean run is rerun with
c_t of step t replaced by the corrupted run's c_t at that step (it feeds the GRU and the output
layer at that step, and the changed state carries on), and the change in log p of the target is
reported per patched step and per target token. The sources need not be equally long: a context
vector has the decoder's size whatever the source's length. Without attention (``score`` none)
the context is the final encoder state, patched the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.decoding.output import DecodeStopped
from attnscope.nn import inference
from attnscope.nn.outputs import EncoderOutput
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.nn.scores import masked_softmax


@dataclass(frozen=True)
class ContextPatch:
    """grid: (T, T) Δ log p of target token j (column) when step i's (row) context comes from
    the corrupted run (zero below the diagonal: a step cannot change earlier tokens);
    steps: (T,) each row summed (or at ``position``); clean, corrupted: (T,) log p per token."""

    grid: Tensor
    steps: Tensor
    clean: Tensor
    corrupted: Tensor


def _step(
    model: RNNSeq2Seq, enc: EncoderOutput, token: Tensor, hidden: Tensor, context: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """One decoder step as :meth:`RNNSeq2Seq._step` (eval mode): token (1,), hidden (1, H) ->
    log-probs (1, V), the new hidden (1, H) and the context (1, H) used, ``context`` if given."""
    emb = model.embed(token)  # (1, E)
    if context is None and model.score is None:
        assert enc.final is not None
        context = enc.final
    elif context is None:
        assert model.score is not None
        weights = masked_softmax(model.score(hidden, enc.memory), enc.mask)  # (1, S)
        context = torch.bmm(weights.unsqueeze(1), enc.memory).squeeze(1)  # (1, H)
    hidden = model.cell(torch.cat([emb, context], dim=-1), hidden)
    out = torch.tanh(inference.linear(model.pre_output, torch.cat([hidden, context, emb], dim=-1)))
    return torch.log_softmax(model._logits(out).float(), -1), hidden, context


def _run(model: RNNSeq2Seq, source: list[int], tgt_in: Tensor) -> tuple[EncoderOutput, Tensor, list[Tensor], list[Tensor]]:
    """The teacher-forced run on tgt_in (T,): the encoder output, log-probs (T, V), the state
    before each step and each step's context (T of each, (1, H))."""
    enc = model.encode(torch.tensor([source], device=tgt_in.device))
    hidden = model.init_state(enc).hidden
    log_probs, states, contexts = [], [], []
    for t in range(tgt_in.size(0)):
        states.append(hidden)
        lp, hidden, context = _step(model, enc, tgt_in[t : t + 1], hidden)
        log_probs.append(lp[0])
        contexts.append(context)
    return enc, torch.stack(log_probs), states, contexts


def patch_context(
    model: RNNSeq2Seq, clean: list[int], corrupted: list[int], target: list[int], *,
    position: int | None = None, should_stop: Callable[[], bool] | None = None,
) -> ContextPatch:
    """Patch each decoder step's context vector from ``corrupted`` (source ids) into the clean run
    on ``target`` (ids ending in </s>). Each patched run starts from the clean state before its
    step (earlier tokens are the clean run's), one row at a time as the model decodes, so
    identical sources give exactly zero; ``should_stop`` is asked before each."""
    if position is not None and not 0 <= position < len(target):
        raise ValueError(f"position {position} is outside the target's {len(target)} tokens")
    stop = should_stop or (lambda: False)
    device, steps = model.device, len(target)
    tgt = torch.tensor(target, device=device)
    tgt_in = torch.cat([tgt.new_tensor([model.config.bos_id]), tgt[:-1]])
    with torch.no_grad():
        enc, clean_lp, states, _ = _run(model, clean, tgt_in)
        _, corrupted_lp, _, donors = _run(model, corrupted, tgt_in)
        clean_chosen = clean_lp.gather(-1, tgt[:, None])[:, 0]  # (T,)
        grid = clean_chosen.new_zeros(steps, steps)
        for t in range(steps):
            if stop():
                raise DecodeStopped()
            hidden = states[t]
            for j in range(t, steps):  # the donor's context at step t only; then the model's own
                lp, hidden, _ = _step(model, enc, tgt_in[j : j + 1], hidden, donors[t] if j == t else None)
                grid[t, j] = lp[0, tgt[j]] - clean_chosen[j]
        corrupted_chosen = corrupted_lp.gather(-1, tgt[:, None])[:, 0]
    summed = grid.sum(-1) if position is None else grid[:, position]
    return ContextPatch(grid, summed, clean_chosen, corrupted_chosen)


def is_rnn(model: object) -> bool:
    """Whether ``model`` is an RNN encoder–decoder whose context vectors can be patched."""
    return isinstance(model, RNNSeq2Seq)
