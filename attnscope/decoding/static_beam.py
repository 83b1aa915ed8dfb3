"""Beam search of a Transformer in fixed shapes, each step replayed as one CUDA graph on a GPU.

:mod:`attnscope.decoding.beam` picks each step's survivors on the host: the ``2k`` best extensions
of every sentence come back as Python lists (one synchronisation a step) and a loop decides which
finish and which go on. On a GPU that wait, and the step's ~150 kernel launches, are most of a
step. This decoder makes the same decisions with tensor operations on the device, over buffers
of one size for the whole decode (:mod:`attnscope.decoding.static_greedy` says how the buffers
stay fixed), so that a whole step, the choice of survivors included, is one graph replay.

The rules are :mod:`~attnscope.decoding.beam`'s, one for one:

- every sentence has ``k`` rows from the first step on; at the first step rows ``1..k-1`` carry
  score ``-inf``, so the best extensions are those of the one real row (the ordinary search runs
  one row there);
- a sentence's ``2k`` best extensions are scanned best first: an end-of-sentence among the first
  ``k`` finishes a hypothesis, ranked ``score / ((5 + |y|) / 6) ** alpha`` (in float64, as the
  host computes it); the first ``k`` others survive (fewer: the empty rows get score ``-inf``);
- a sentence stops once it has ``k`` finished hypotheses, or at its own budget, where the
  survivors finish as they are; the best-ranked finished hypothesis is returned, the first one
  found among equals;
- only each sentence's best finished hypothesis is kept (its step, row, last token, score), and
  each step's back-pointers; the output is backtracked once, at the end, and its attention taken
  along its own rows, as the ordinary search does.

GNMT's coverage penalty, when asked for, is the ordinary search's: each row's coverage sums the
last layer's cross-attention row (averaged over heads) step by step and is reordered with the
row; its penalty is added to the ranking of the hypotheses it finishes. The self-attention keys
and values are reordered by the survivors' parents every step (an ``index_select`` on the
device). No prefix, beam tree or step callback: the decode plan sends those to the ordinary
search. The tokens are the ordinary search's, up to
ties between exactly equal scores (``topk`` over ``k * V`` instead of ``V`` at the first step)
and float rounding in another batch shape; tests/decoding/test_static_beam.py checks them on the
CPU, where the same step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import cast

import torch
from torch import Tensor

from attnscope.decoding import static_greedy as sg
from attnscope.decoding.output import (
    DEFAULT_ALPHA,
    DecodeOutput,
    check_stop,
    length_penalty,
    never_emit,
    plan_decoding,
    stack_padded,
)
from attnscope.decoding.plan import DecodeOptions
from attnscope.nn.base import Seq2Seq
from attnscope.nn.transformer import Transformer

NEG_INF = float("-inf")


class StaticBeam(sg.StaticGreedy):
    """The fixed buffers of one (batch, beam, source capacity, length capacity) and its step.

    Rows ``b * k .. b * k + k - 1`` are sentence ``b``'s hypotheses (``N = B * k`` rows)."""

    def __init__(self, model: Transformer, key: tuple[int, int, int, int, bool], device: torch.device) -> None:
        batch, beam, source, length, self.with_coverage = key
        super().__init__(model, (batch * beam, source, length), device)
        self.batch, self.beam = batch, beam
        n = batch * beam
        with torch.inference_mode(False), torch.no_grad():
            def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
                return torch.zeros(*shape, dtype=dtype, device=device)

            self.scores = zeros(n)
            self.coverage = zeros(n, source)  # GNMT's coverage: the attention each source position got
            self.beta = zeros(1)
            self.penalty = zeros(length, dtype=torch.float64)  # length_penalty(t + 1, alpha) of step t
            self.limits = zeros(batch, dtype=torch.long)  # per sentence (the base class: per row)
            self.alive = zeros(batch, dtype=torch.bool)  # still searching
            self.count = zeros(batch, dtype=torch.long)  # finished hypotheses so far
            self.best_rank = zeros(batch, dtype=torch.float64)
            self.best = zeros(3, batch, dtype=torch.long)  # step, row at that step, last token
            self.best_score = zeros(batch)
            self.best_lp = zeros(batch)
            # row r at step t was fed in_token[t, r] (chosen at t - 1 from row parent[t, r])
            self.parent = zeros(length + 1, n, dtype=torch.long)
            self.in_token = zeros(length + 1, n, dtype=torch.long)
            self.in_lp = zeros(length + 1, n)
            self.group_first = torch.arange(batch, device=device) * beam  # (B,)
            self.slots = torch.arange(2 * beam, device=device)  # (2K,)

    def load_beams(
        self, cross_kv: list[tuple[Tensor, Tensor]], cross_mask: Tensor, limits: Tensor, penalties: tuple[float, float]
    ) -> None:
        """Start a search: per sentence, cross keys/values (B, H, S, Dh), mask (B, 1, 1, S) and
        budget (B,); ``penalties`` GNMT's alpha (length) and beta (coverage)."""
        alpha, beta = penalties
        k = self.beam
        rows = [(key.repeat_interleave(k, 0), value.repeat_interleave(k, 0)) for key, value in cross_kv]
        self.load_source(rows, cross_mask.repeat_interleave(k, 0))
        with torch.no_grad():
            self.limits.copy_(limits)
            self.alive.fill_(True)
            self.count.zero_()
            self.best_rank.fill_(NEG_INF)
            self.best.zero_()
            self.best_score.zero_()
            self.best_lp.zero_()
            self.scores.fill_(NEG_INF)
            self.scores[::k] = 0.0  # one real row per sentence at the first step
            self.coverage.zero_()
            self.beta.fill_(beta)
            self.parent.zero_()
            self.in_token.zero_()
            self.in_lp.zero_()
            table = [length_penalty(t + 1, alpha) for t in range(self.penalty.numel())]  # the host's float64
            self.penalty.copy_(torch.tensor(table, dtype=torch.float64))

    def step(self) -> None:
        """One step (what the graph records): the layers over every row, then the search's choice
        of finished hypotheses and survivors, all on the device."""
        m, c = self.model, self.model.config
        pos = self.position
        x = self.embed()
        written = self.key_positions.le(pos)
        for index, w in enumerate(self.weights):
            x = self._layer(index, w, x, written)
        log_probs = torch.log_softmax(m.logits(m.decoder_norm(x[:, 0])).float(), dim=-1)
        penalties = None
        if self.with_coverage:  # as beam.py: the last layer's row averaged over heads, summed over steps
            self.coverage.add_(self.cross_rows[:, -1].index_select(2, pos)[:, :, 0].mean(dim=1))
            mask = self.source_mask[:, 0, 0]  # (N, Sc) True at real positions
            penalties = (self.beta * self.coverage.clamp(min=1e-6, max=1.0).log().masked_fill(~mask, 0.0).sum(-1)).double()
        self._choose(never_emit(log_probs, c.pad_id, c.bos_id, inplace=True), penalties)
        pos.add_(1)

    def _choose(self, log_probs: Tensor, penalties: Tensor | None) -> None:
        """log_probs (N, V): finish, keep and reorder as :class:`attnscope.decoding.beam._Search`
        does at this step; penalties (N,) each row's coverage penalty (float64), or None."""
        c, k, b = self.model.config, self.beam, self.batch
        pos, vocab = self.position, log_probs.size(-1)
        sums = (self.scores[:, None] + log_probs).view(b, k * vocab)
        top, flat = sums.topk(2 * k, dim=1)  # (B, 2K), best first
        top_lp = log_probs.view(b, k * vocab).gather(1, flat)
        parent = flat // vocab + self.group_first[:, None]  # (B, 2K) row at this step
        word = flat % vocab
        finite, eos = top > NEG_INF, word.eq(c.eos_id)
        alive = self.alive[:, None]
        ends = finite & eos & (self.slots < k) & alive  # (B, 2K) hypotheses finished by EOS
        goes = finite & ~eos
        slot = goes.long().cumsum(1) - 1
        goes &= slot < k
        # the survivors, packed into k slots per sentence (column k takes the rest, then is cut off)
        to = torch.where(goes, slot, k)
        new_score = torch.full((b, k + 1), NEG_INF, device=top.device).scatter(1, to, top)[:, :k]
        new_word = torch.full((b, k + 1), c.pad_id, device=top.device).scatter(1, to, word)[:, :k]
        new_lp = torch.zeros(b, k + 1, device=top.device).scatter(1, to, top_lp)[:, :k]
        new_parent = self.group_first[:, None].expand(b, k + 1).contiguous().scatter(1, to, parent)[:, :k]
        last = self.limits.eq(pos + 1) & self.alive  # (B,) out of budget: survivors finish
        kept = new_score > NEG_INF
        penalty = self.penalty.index_select(0, pos)  # (1,) float64
        end_rank, kept_rank = top.double() / penalty, new_score.double() / penalty
        if penalties is not None:
            end_rank, kept_rank = end_rank + penalties[parent], kept_rank + penalties[new_parent]
        rank_end = torch.where(ends, end_rank, NEG_INF)
        rank_kept = torch.where(kept & last[:, None], kept_rank, NEG_INF)
        ranks = torch.cat([rank_end, rank_kept], 1)  # (B, 3K) in the host's order of finishing
        best_rank, at = ranks.max(dim=1)  # the first of equals
        better = best_rank > self.best_rank
        cand = lambda a, b_: torch.cat([a, b_], 1).gather(1, at[:, None])[:, 0]  # noqa: E731
        found = torch.stack([pos.expand(b), cand(parent, new_parent), cand(word, new_word)])
        self.best.copy_(torch.where(better, found, self.best))
        self.best_score.copy_(torch.where(better, cand(top, new_score), self.best_score))
        self.best_lp.copy_(torch.where(better, cand(top_lp, new_lp), self.best_lp))
        self.best_rank.copy_(torch.where(better, best_rank, self.best_rank))
        self.count.add_(ends.sum(1) + torch.where(last, kept.sum(1), 0))
        self.alive.logical_and_(self.count.lt(k) & ~last)
        # the survivors become the next step's rows
        rows = new_parent.reshape(-1)  # (N,)
        for cache in self.self_kv:
            cache.copy_(cache.index_select(1, rows))
        if penalties is not None:
            self.coverage.copy_(self.coverage.index_select(0, rows))
        nxt = pos + 1
        self.parent.index_copy_(0, nxt, rows[None])
        self.in_token.index_copy_(0, nxt, new_word.reshape(1, -1))
        self.in_lp.index_copy_(0, nxt, new_lp.reshape(1, -1))
        self.tokens.copy_(new_word.reshape(-1))
        self.scores.copy_(new_score.reshape(-1))

    def backtrack(self) -> list[tuple[list[int], list[float], list[int]]]:
        """Each sentence's best hypothesis: its tokens, their log-probabilities and its row at each
        step (one copy to the host, at the end)."""
        step, row, token = self.best.tolist()
        lps = self.best_lp.tolist()
        last = max(step) + 1
        parent, in_token, in_lp = (t[: last + 1].tolist() for t in (self.parent, self.in_token, self.in_lp))
        paths = []
        for b in range(self.batch):
            tokens, logprobs, rows, r = [token[b]], [lps[b]], [row[b]], row[b]
            for t in range(step[b], 0, -1):
                tokens.append(in_token[t][r])
                logprobs.append(in_lp[t][r])
                r = parent[t][r]
                rows.append(r)
            paths.append((tokens[::-1], logprobs[::-1], rows[::-1]))
        return paths


@torch.no_grad()
def static_beam_search(
    model: Seq2Seq,
    src: Tensor,
    options: DecodeOptions,
    *,
    should_stop: Callable[[], bool] | None = None,
    graphs: bool | None = None,
) -> DecodeOutput | None:
    """:func:`~attnscope.decoding.beam.beam_search` in fixed shapes, for ``options`` without a
    prefix or tree (the plan's check); ``graphs`` (default: on CUDA) replays
    each step as a CUDA graph. None when this path cannot take the call (the budget exceeds the
    model's positions, or the shape's graph is serving another call): the caller searches the
    ordinary way."""
    padded, budgets = sg.bucketed(src, options.max_length)
    out = _search(model, padded, replace(options, max_length=budgets), should_stop, graphs)
    return None if out is None else sg.trimmed(out, src.size(0))


def _search(
    model: Seq2Seq, src: Tensor, options: DecodeOptions, should_stop: Callable[[], bool] | None, graphs: bool | None
) -> DecodeOutput | None:
    """:func:`static_beam_search` on a batch of a bucket's size."""
    model = cast(Transformer, model)
    c = model.config
    _, limits = plan_decoding(
        c, src, None, ratio=options.max_len_ratio, offset=options.max_len_offset, max_length=options.max_length
    )
    limit = max(limits)
    caps = sg.capacities(src.size(1), limit, c.max_positions)
    if caps is None:
        return None
    graphs = src.device.type == "cuda" and not sg.capture_failed() if graphs is None else graphs
    beta = options.coverage_penalty or 0.0
    key = (src.size(0), options.beam_size, *caps, beta > 0)
    runner, new = sg.runner_for(model, ("beam", *key), src.device, graphs, lambda: StaticBeam(model, key, src.device))
    runner = cast(StaticBeam, runner)
    if not runner.lock.acquire(blocking=False):
        return None
    try:
        check_stop(should_stop, 0)
        enc = model.encode(src, need_weights=options.need_weights)
        state = model.init_state(enc)
        budgets = torch.tensor(limits, device=src.device)
        penalties = (DEFAULT_ALPHA if options.alpha is None else options.alpha, beta)
        runner.load_beams(state.cross_kv, state.cross_mask, budgets, penalties)
        if new and graphs:
            sg.capture(runner)
            runner.load_beams(state.cross_kv, state.cross_mask, budgets, penalties)
        steps = 0
        while steps < limit:
            runner.run()
            steps += 1
            if steps % sg.CHECK_EVERY == 0 or steps == limit:
                if not bool(runner.alive.any()):
                    break
                check_stop(should_stop, steps)
        return _output(runner, enc, src, options.need_weights)
    finally:
        runner.lock.release()


def _output(runner: StaticBeam, enc: object, src: Tensor, need_weights: bool) -> DecodeOutput:
    """The best hypotheses, padded, with the attention along their rows."""
    c, device = runner.model.config, src.device
    paths = runner.backtrack()
    length = max(len(tokens) for tokens, _, _ in paths)
    cross = decoder_self = None
    if need_weights:
        rows = torch.tensor([rows + [rows[-1]] * (length - len(rows)) for _, _, rows in paths], device=device)
        steps = torch.arange(length, device=device).expand_as(rows)
        real = (steps < torch.tensor([len(p[2]) for p in paths], device=device)[:, None])[:, None, None, :, None]
        # (B, T, L, H, key) picked row by row, step by step, then (B, L, H, T, key)
        cross = runner.cross_rows[rows, :, :, steps, : src.size(1)].permute(0, 2, 3, 1, 4) * real
        decoder_self = runner.self_rows[rows, :, :, steps, :length].permute(0, 2, 3, 1, 4) * real
    return DecodeOutput(
        tokens=stack_padded([torch.tensor(t) for t, _, _ in paths], length, pad_value=c.pad_id).long().to(device),
        lengths=torch.tensor([len(t) for t, _, _ in paths], device=device),
        source_lengths=enc.mask.sum(1),  # type: ignore[attr-defined]
        scores=runner.best_score.clone(),
        token_logprobs=stack_padded([torch.tensor(lp) for _, lp, _ in paths], length).to(device),
        encoder_self=enc.encoder_self,  # type: ignore[attr-defined]
        cross=cross,
        decoder_self=decoder_self,
    )
