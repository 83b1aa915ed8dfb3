"""Greedy decoding, batched over sentences, incremental (one decoder step per output token).

A sentence that has produced ``</s>`` leaves the batch: its decoder state and encoder rows are
dropped, so later steps only compute the sentences still being decoded. A ``prefix`` forces each
sentence's first tokens (their log-probabilities are recorded as usual), then decoding goes on
freely from there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Unpack

import torch
from torch import Tensor

from attnscope.decoding import static_greedy
from attnscope.decoding.history import AttentionHistory
from attnscope.decoding.output import DecodeOutput, check_stop, never_emit, plan_decoding
from attnscope.decoding.plan import DecodeKw, DecodeOptions, DecodePlan, make_plan, options_of
from attnscope.decoding.sampling import Sampling, draw, generators
from attnscope.decoding.steps import Candidate, DecodeStep, StepCallback
from attnscope.nn import native
from attnscope.nn.base import Seq2Seq, reorder_encoder
from attnscope.nn.config import ModelConfig
from attnscope.nn.outputs import StepOutput


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq,
    src: Tensor,
    options: DecodeOptions | None = None,
    plan: DecodePlan | None = None,
    *,
    should_stop: Callable[[], bool] | None = None,
    on_step: StepCallback | None = None,
    **keywords: Unpack[DecodeKw],
) -> DecodeOutput:
    """src: (B, S) padded source ids (each ending with EOS). Stops when every sentence has
    produced EOS or after ``max_length`` (default ``ratio * S + offset``) tokens.

    options (or the same by keyword): ``need_weights``, ``max_length`` (one budget for all
    sentences or one per sentence: a sentence that reaches its own stops there, exactly as if
    decoded alone with it), ``prefix`` (per sentence, target ids forced before free decoding; no
    pad, ``<s>`` or ``</s>``), ``max_len_ratio``/``max_len_offset``; the search options are
    ignored. plan: which path runs (default: :func:`~attnscope.decoding.plan.make_plan`'s).
    should_stop: asked before every step; True raises DecodeStopped (a client gone, a deadline).
    on_step: called after every step with what it did (:mod:`attnscope.decoding.steps`).

    On a GPU with ``ATTNSCOPE_CUDA_GRAPHS=1``, a Transformer without a prefix decodes through
    :mod:`attnscope.decoding.static_greedy` (fixed shapes, each step a CUDA graph): the same tokens."""
    opts = options_of(options, keywords)
    plan = plan or make_plan(model, src, opts, search="greedy", streamed=on_step is not None)
    if plan.static:
        out = static_greedy.static_greedy_decode(
            model, src, need_weights=opts.need_weights, max_len_ratio=opts.max_len_ratio,
            max_len_offset=opts.max_len_offset, max_length=opts.max_length, should_stop=should_stop,
        )  # fmt: skip
        if out is not None:
            return out
    return _decode(model, src, opts, plan, should_stop, on_step)


def _decode(
    model: Seq2Seq,
    src: Tensor,
    options: DecodeOptions,
    plan: DecodePlan,
    should_stop: Callable[[], bool] | None,
    on_step: StepCallback | None,
) -> DecodeOutput:
    """:func:`greedy_decode` step by step (the ordinary path)."""
    need_weights, c = options.need_weights, model.config
    batch, device = src.size(0), src.device
    prefixes, limits = plan_decoding(
        c, src, options.prefix, ratio=options.max_len_ratio, offset=options.max_len_offset,
        max_length=options.max_length,
    )  # fmt: skip
    limit, first_limit = max(limits), min(limits)
    row_limits = torch.tensor(limits, device=device)  # (B,)
    enc = model.encode(src, need_weights=need_weights)
    forced_width = max(len(p) for p in prefixes)
    forced = _forced(prefixes, device)

    out_tokens = torch.full((batch, limit), c.pad_id, dtype=torch.long, device=device)
    out_lp, lengths = torch.zeros(batch, limit, device=device), row_limits.clone()
    history, alive_per_step = AttentionHistory(), []
    alive = torch.arange(batch, device=device)  # the sentence each row decodes
    alive_list = list(range(batch))
    rows_enc, state = model.step_inputs(enc), model.init_state(enc, path=plan.step)
    tokens = torch.full((batch,), c.bos_id, dtype=torch.long, device=device)
    sampling = options.sampling
    drawers = generators(sampling, batch, device) if sampling is not None else []  # one per sentence
    steps = 0
    for t in range(limit):
        check_stop(should_stop, t)
        step, state = model.step(tokens, state, rows_enc, need_weights=plan.record_weights)
        history.record(step)
        alive_per_step.append(alive_list)
        log_probs = step.log_probs  # (N, V)
        logp, tokens = _choose(log_probs, c, plan, sampling, [drawers[s] for s in alive_list] if drawers else [])
        if t < forced_width:
            wanted = forced[alive, t]
            tokens = torch.where(wanted >= 0, wanted, tokens)
            logp = log_probs.gather(1, tokens[:, None])[:, 0]
        if len(alive_list) == batch:  # every sentence still decoding: rows are sentences
            out_tokens[:, t] = tokens
            out_lp[:, t] = logp
        else:
            out_tokens[alive, t] = tokens
            out_lp[alive, t] = logp
        steps = t + 1
        if on_step is not None:
            totals = out_lp[alive_list, : t + 1].sum(1)  # (N,) each sentence's log-probability so far
            on_step(_step_event(t, alive_list, step, log_probs, (tokens, logp, totals), enc.encoder_self))
        finished = tokens.eq(c.eos_id)
        if t + 1 >= first_limit:  # a sentence may be out of budget
            finished |= row_limits[alive].le(t + 1)
        if t == limit - 1 or not bool(finished.any()):
            continue
        lengths[alive[finished]] = t + 1
        keep = (~finished).nonzero()[:, 0]
        if keep.numel() == 0:
            break
        alive, tokens = alive[keep], tokens[keep]
        alive_list = alive.tolist()
        state = state.reorder(keep)
        rows_enc = reorder_encoder(rows_enc, keep)

    cross, decoder_self = history.gather(_paths(alive_per_step, batch)) if need_weights else (None, None)
    return DecodeOutput(
        tokens=out_tokens[:, :steps],
        lengths=lengths.clamp(max=steps),
        source_lengths=enc.mask.sum(1),
        scores=out_lp.sum(1),
        token_logprobs=out_lp[:, :steps],
        encoder_self=enc.encoder_self,
        cross=cross,
        decoder_self=decoder_self,
        forced_tokens=None if options.prefix is None else [len(p) for p in prefixes],
    )


def _choose(
    log_probs: Tensor, c: ModelConfig, plan: DecodePlan, sampling: Sampling | None, rows: list[torch.Generator]
) -> tuple[Tensor, Tensor]:
    """log_probs: (N, V), pad and BOS set to -inf in place -> (N,) each: the chosen tokens'
    log-probabilities and the tokens, the argmax (natively where built) or, with ``sampling``,
    a draw with each row's sentence's generator ``rows[i]``."""
    best = native.best_words(log_probs, (c.pad_id, c.bos_id)) if plan.native_search and sampling is None else None
    if best is not None:
        return best
    never_emit(log_probs, c.pad_id, c.bos_id, inplace=True)
    if sampling is None:
        logp, tokens = log_probs.max(dim=-1)
        return logp, tokens
    drawn = draw(log_probs, sampling, rows)
    return log_probs.gather(1, drawn[:, None])[:, 0], drawn


def _forced(prefixes: list[list[int]], device: torch.device) -> Tensor:
    """(B, max(1, longest prefix)): each sentence's forced token at each step, -1 where none."""
    forced = torch.full((len(prefixes), max(1, *(len(p) for p in prefixes))), -1, dtype=torch.long)
    for b, p in enumerate(prefixes):
        forced[b, : len(p)] = torch.tensor(p, dtype=torch.long)
    return forced.to(device)


def _step_event(
    t: int,
    alive: list[int],
    step: StepOutput,
    log_probs: Tensor,
    chosen: tuple[Tensor, Tensor, Tensor],
    encoder_self: Tensor | None,
) -> DecodeStep:
    """What step ``t`` did, for ``on_step``. log_probs: (N, V); chosen: (N,) each, the tokens,
    their log-probabilities and each sentence's total so far; ``encoder_self`` goes with step 0 only."""
    tokens, logp, totals = chosen
    candidates: list[Candidate | None] = [
        Candidate(parent=r, token=w, logprob=lp, score=total)
        for r, (w, lp, total) in enumerate(zip(tokens.tolist(), logp.tolist(), totals.tolist(), strict=True))
    ]
    return DecodeStep(
        step=t, sentences=alive, log_probs=log_probs, cross=step.cross, decoder_self=step.decoder_self,
        chosen=candidates, encoder_self=encoder_self if t == 0 else None,
    )  # fmt: skip


def _paths(alive_per_step: list[list[int]], batch: int) -> list[list[int]]:
    """The row each sentence occupied at every step it was decoded."""
    paths: list[list[int]] = [[] for _ in range(batch)]
    for alive in alive_per_step:
        for row, sentence in enumerate(alive):
            paths[sentence].append(row)
    return paths
