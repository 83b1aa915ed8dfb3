"""Beam search, batched over sentences, built on back-pointers.

Each step records, for the rows alive at that step only, the row's parent at the previous step,
the token it was extended with and that token's log-probability, plus the step's attention rows
(:class:`~app.decoding.history.AttentionHistory`, unpadded). Nothing recorded is ever copied or
re-indexed again: memory and time grow linearly with the output length. A finished hypothesis is
a (step, row, token) triple; the returned one is backtracked once, at the end, and its attention
is gathered along its own path, so it is exactly the attention of that hypothesis.

A sentence stops when it has ``beam_size`` finished hypotheses (or at the length limit, where
live ones are finished as they are), and then leaves the batch. Ranking uses the GNMT length
penalty ``score / ((5 + |y|) / 6) ** alpha`` plus, when ``coverage_penalty`` (beta) is positive,
GNMT's coverage penalty ``beta * sum_i log(min(sum_j a_ji, 1))`` (Wu et al. 2016) computed from
the cross-attention; for the Transformer, ``a`` is the last decoder layer's cross-attention
averaged over its heads. The recorded steps are the beam tree: ``return_tree=True`` also returns
it (:mod:`app.decoding.tree`), at no cost when not asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from app.decoding.history import AttentionHistory, gnmt_coverage, last_layer_cross
from app.decoding.output import (
    DecodeOutput,
    check_stop,
    never_emit,
    plan_decoding,
    stack_padded,
)
from app.decoding.steps import Candidate, DecodeStep, StepCallback
from app.decoding.tree import FinishedHypothesis, SearchTree
from app.nn import native
from app.nn.base import Seq2Seq, reorder_encoder
from app.nn.outputs import StepOutput

NEG_INF = float("-inf")


@dataclass
class _Finished:
    step: int
    row: int  # the row at ``step`` that emitted ``token``
    token: int
    logprob: float
    score: float
    ranking: float
    node: int = -1


@dataclass
class _Candidate:
    parent: int  # row at the current step
    token: int
    score: float
    logprob: float
    node: int = -1  # in the beam tree, when one is built


class _BackPointers:
    """Host-side record of how every row came to be: ``parent[t][r]`` is the row at step t-1
    that row ``r`` of step ``t`` extends, with ``token[t][r]`` (its log-probability
    ``logprob[t][r]``). Step 0 has one implicit root."""

    def __init__(self) -> None:
        self.parent: list[list[int]] = [[]]
        self.token: list[list[int]] = [[]]
        self.logprob: list[list[float]] = [[]]

    def add_step(self, kept: list[_Candidate]) -> None:
        self.parent.append([k.parent for k in kept])
        self.token.append([k.token for k in kept])
        self.logprob.append([k.logprob for k in kept])

    def backtrack(self, f: _Finished) -> tuple[list[int], list[float], list[int]]:
        """Tokens, their log-probabilities and the row at each step of hypothesis ``f``."""
        tokens, logprobs, rows = [f.token], [f.logprob], [f.row]
        row = f.row
        for t in range(f.step, 0, -1):
            tokens.append(self.token[t][row])
            logprobs.append(self.logprob[t][row])
            row = self.parent[t][row]
            rows.append(row)
        return tokens[::-1], logprobs[::-1], rows[::-1]


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    *,
    beam_size: int = 5,
    alpha: float = 0.6,
    need_weights: bool = True,
    max_len_ratio: float = 1.5,
    max_len_offset: int = 10,
    max_length: int | Sequence[int] | None = None,
    prefix: Sequence[Sequence[int]] | None = None,
    coverage_penalty: float = 0.0,
    return_tree: bool = False,
    should_stop: Callable[[], bool] | None = None,
    on_step: StepCallback | None = None,
) -> DecodeOutput:
    """src: (B, S) padded source ids. Returns the best hypothesis of each sentence.

    prefix: per sentence, target ids forced before the search starts (no pad, ``<s>``, ``</s>``).
    coverage_penalty: GNMT's beta (0 disables it; needs a model with cross-attention).
    return_tree: also return each sentence's :class:`SearchTree` (``DecodeOutput.trees``).
    max_length: one budget for all sentences or one per sentence (each sentence finishes at its
    own, exactly as if decoded alone with it).
    should_stop: asked before every step; True raises DecodeStopped (a client gone, a deadline).
    on_step: called after every step with what it did (:mod:`app.decoding.steps`)."""
    if beam_size < 1:
        raise ValueError("beam_size must be at least 1")
    if coverage_penalty < 0:
        raise ValueError("coverage_penalty must not be negative")
    c, k = model.config, beam_size
    if coverage_penalty > 0 and "cross" not in c.attention_kinds:
        raise ValueError("coverage_penalty needs a model with cross-attention")
    batch, device = src.size(0), src.device
    prefixes, limits = plan_decoding(
        c, src, prefix, ratio=max_len_ratio, offset=max_len_offset, max_length=max_length
    )
    limit = max(limits)
    enc = model.encode(src, need_weights=need_weights)
    src_lengths = enc.mask.sum(1)
    use_coverage = coverage_penalty > 0

    alive = list(range(batch))  # sentence of each group of ``width`` consecutive rows
    # The first step runs one row per sentence (its other beams would be copies of it, with no
    # score yet), as CTranslate2 does on the CPU; then model.expand_beams makes k of each.
    rows_enc, state = model.init_beams(enc, 1)  # encoder rows: one per row, or per sentence
    width, expanded = 1, False  # rows per sentence at this step
    scores = torch.zeros(batch, device=device)
    host_scores = scores.tolist()
    tokens = torch.full((batch,), c.bos_id, dtype=torch.long, device=device)
    coverage = torch.zeros(batch, src.size(1), device=device) if use_coverage else None
    history, pointers = AttentionHistory(), _BackPointers()
    finished: list[list[_Finished]] = [[] for _ in range(batch)]
    trees = [SearchTree.rooted(c.bos_id) for _ in range(batch)] if return_tree else None
    nodes = [0] * batch  # the tree node each row holds (the root at the start)

    for t in range(limit):
        check_stop(should_stop, t)
        step, state = model.step(tokens, state, rows_enc, need_weights=need_weights or use_coverage)
        if need_weights:
            history.record(step)
        log_probs = step.log_probs  # (N, V)
        vocab, groups = log_probs.size(-1), len(alive)
        count = min(2 * k, width * vocab)
        # (G, 2K) each: scores, flat indices row_in_group * V + word, log-probabilities
        ranked = native.top_candidates(scores, log_probs, groups, count, (c.pad_id, c.bos_id))
        if ranked is None:
            log_probs = never_emit(log_probs, c.pad_id, c.bos_id, inplace=True)
            top_scores, top_idx = top_candidates(scores, log_probs, groups, count)
            top_lp = log_probs.view(groups, width * vocab).gather(1, top_idx)
        else:
            top_scores, top_idx, top_lp = ranked
        penalties = [0.0] * (groups * width)
        if coverage is not None:
            assert step.cross is not None
            coverage = coverage + last_layer_cross(step.cross)  # (N, S)
            mask = rows_enc.mask  # (N, S), or (G, S) when the model shares encoder rows
            mask = mask if mask.size(0) == coverage.size(0) else mask.repeat_interleave(k, 0)
            penalties = gnmt_coverage(coverage, mask, coverage_penalty).tolist()
        forced = _forced_tokens(alive, prefixes, t, width, log_probs)
        flat = top_idx.tolist()  # row_in_group * vocab + word; split here, not by two tensor ops
        parents_local = [[i // vocab for i in row] for row in flat]
        words = [[i % vocab for i in row] for row in flat]
        top_list, lp_list = top_scores.tolist(), top_lp.tolist()

        kept: list[_Candidate] = []
        ended: list[_Candidate] = []  # kept by sentences that finished at this step
        still_alive: list[int] = []
        for g, b in enumerate(alive):
            last = t == limits[b] - 1  # this sentence's budget ends with this step
            first = g * width  # the sentence's first row at this step
            if g in forced:  # the prefix decides; only the first row is alive during it
                w, lp = forced[g]
                keep = [_Candidate(first, w, host_scores[first] + lp, lp)]
            else:
                keep = []
                for j, (p_local, w, sc, lp) in enumerate(
                    zip(parents_local[g], words[g], top_list[g], lp_list[g], strict=True)
                ):
                    if sc == NEG_INF:
                        continue
                    row = first + p_local
                    if w == c.eos_id:
                        if j < k:
                            ranking = sc / length_penalty(t + 1, alpha) + penalties[row]
                            finished[b].append(_Finished(t, row, w, lp, sc, ranking))
                            if trees is not None:
                                finished[b][-1].node = trees[b].add(
                                    parent=nodes[row],
                                    token=w,
                                    logprob=lp,
                                    score=sc,
                                    finished=True,
                                )
                    elif len(keep) < k:
                        keep.append(_Candidate(row, w, sc, lp))
            if trees is not None:
                for x in keep:
                    x.node = trees[b].add(
                        parent=nodes[x.parent],
                        token=x.token,
                        logprob=x.logprob,
                        score=x.score,
                        finished=last,
                    )
            if last:  # out of budget: live hypotheses finish as they are
                for x in keep:
                    ranking = x.score / length_penalty(t + 1, alpha) + penalties[x.parent]
                    finished[b].append(
                        _Finished(t, x.parent, x.token, x.logprob, x.score, ranking, x.node)
                    )
            if len(finished[b]) >= k or last:
                ended += [] if last else keep
                continue  # this sentence is done and leaves the batch
            still_alive.append(b)
            kept += keep + [_Candidate(first, c.pad_id, NEG_INF, 0.0)] * (k - len(keep))  # dead slots
        if on_step is not None:
            done = [f for b in alive for f in finished[b] if f.step == t]
            rows = [b for b in alive for _ in range(width)]
            on_step(_step_report(t, rows, log_probs, step, (kept, ended), done, enc.encoder_self, need_weights))
        if not still_alive:
            break
        pointers.add_step(kept)
        nodes = [x.node for x in kept]
        index = torch.tensor([x.parent for x in kept], device=device)
        tokens = torch.tensor([x.token for x in kept], device=device)
        host_scores = [x.score for x in kept]
        scores = torch.tensor(host_scores, device=device)
        if coverage is not None:
            coverage = coverage.index_select(0, index)
        if not expanded:  # after the first step: k rows per sentence from here on
            rows_enc, state = model.expand_beams(rows_enc, state, index, k)
            width, expanded = k, True
        else:
            state = state.reorder(index)
            if len(still_alive) < len(alive):  # sentences left: drop their encoder rows
                per_sentence = rows_enc.mask.size(0) == len(alive)
                rows_enc = reorder_encoder(rows_enc, index[::k] // k if per_sentence else index)
        alive = still_alive

    best = [max(f, key=lambda h: h.ranking) for f in finished]
    paths = [pointers.backtrack(h) for h in best]
    cross = decoder_self = None
    if need_weights:
        cross, decoder_self = history.gather([rows for _, _, rows in paths])
    if trees is not None:
        _close_trees(trees, finished, pointers, best)
    length = max(len(toks) for toks, _, _ in paths)
    return DecodeOutput(
        tokens=stack_padded(
            [torch.tensor(toks) for toks, _, _ in paths], length, pad_value=c.pad_id
        )
        .long()
        .to(device),
        lengths=torch.tensor([len(toks) for toks, _, _ in paths], device=device),
        source_lengths=src_lengths,
        scores=torch.tensor([h.score for h in best], device=device),
        token_logprobs=stack_padded([torch.tensor(lps) for _, lps, _ in paths], length).to(device),
        encoder_self=enc.encoder_self,
        cross=cross,
        decoder_self=decoder_self,
        forced_tokens=None if prefix is None else [len(p) for p in prefixes],
        trees=trees,
    )


CHUNKS = 16  # top_candidates' members per chunk
CHUNKED_FROM = 1 << 17  # log-probabilities from which the chunked search is faster on the CPU


def top_candidates(scores: Tensor, log_probs: Tensor, groups: int, count: int) -> tuple[Tensor, Tensor]:
    """The ``count`` best extensions of each sentence: scores (N,) of its rows plus log_probs
    (N, V), N = groups * width, the rows of a sentence consecutive. Returns their scores and flat
    indices ``row_in_group * V + word``, (G, count), best first: ``topk`` over the (G, width * V)
    sums.

    Large inputs take an exact shortcut instead of summing and searching all of them (at batch
    32 × beam 5, 1.28 M candidates, ``topk`` was a twentieth of a step): each row's words are cut
    into chunks of ``CHUNKS`` (word ``c * V/CHUNKS + j`` in chunk j), the ``count`` chunks with the
    best maxima are kept, and the top ``count`` of their members taken. A candidate among the best
    ``count`` lies in a chunk whose maximum is at least the ``count``-th best score, and at most
    ``count`` chunks have such a maximum, so none is missed (ties may be broken differently)."""
    rows, vocab = log_probs.shape
    width = rows // groups
    per = vocab // CHUNKS
    if log_probs.numel() < CHUNKED_FROM or vocab % CHUNKS or count > width * per:
        return (scores[:, None] + log_probs).view(groups, width * vocab).topk(count, dim=1)
    best = log_probs.view(rows, CHUNKS, per).amax(1) + scores[:, None]  # (N, per): chunk maxima
    _, chunk = best.view(groups, width * per).topk(count, dim=1)  # (G, count) of row * per + j
    row_in_group, column = chunk // per, chunk % per
    row = torch.arange(groups, device=scores.device)[:, None] * width + row_in_group  # (G, count)
    words = column[:, :, None] + per * torch.arange(CHUNKS, device=scores.device)  # (G, count, C)
    values = (log_probs[row[:, :, None], words] + scores[row][:, :, None]).view(groups, -1)
    top, position = values.topk(count, dim=1)
    return top, (row_in_group[:, :, None] * vocab + words).view(groups, -1).gather(1, position)


def _forced_tokens(
    alive: list[int], prefixes: list[list[int]], t: int, width: int, log_probs: Tensor
) -> dict[int, tuple[int, float]]:
    """Groups (of ``width`` rows) whose sentence is still inside its prefix at step ``t``:
    group -> (the forced token, its log-probability from the group's one live row)."""
    wanted = [(g, prefixes[b][t]) for g, b in enumerate(alive) if t < len(prefixes[b])]
    if not wanted:
        return {}
    lps = log_probs[[g * width for g, _ in wanted], [w for _, w in wanted]].tolist()
    return {g: (w, lp) for (g, w), lp in zip(wanted, lps, strict=True)}


def _step_report(
    t: int,
    rows: list[int],
    log_probs: Tensor,
    step: StepOutput,
    kept: tuple[list[_Candidate], list[_Candidate]],
    done: list[_Finished],
    encoder_self: Tensor | None,
    need_weights: bool,
) -> DecodeStep:
    """Step ``t`` as :class:`DecodeStep`: the rows kept for the next step (dead slots as None),
    those kept by sentences that finished here, and the hypotheses that finished. log_probs: (N, V)."""
    going, ended = kept
    return DecodeStep(
        step=t,
        sentences=rows,
        log_probs=log_probs,
        cross=step.cross if need_weights else None,
        decoder_self=step.decoder_self if need_weights else None,
        chosen=[
            None if x.score == NEG_INF else Candidate(x.parent, x.token, x.logprob, x.score, x.node)
            for x in going
        ],
        ended=[Candidate(x.parent, x.token, x.logprob, x.score, x.node) for x in ended],
        finished=[Candidate(f.row, f.token, f.logprob, f.score, f.node, f.ranking) for f in done],
        encoder_self=encoder_self if t == 0 else None,
        beam=True,
    )


def _close_trees(
    trees: list[SearchTree],
    finished: list[list[_Finished]],
    pointers: _BackPointers,
    best: list[_Finished],
) -> None:
    """Fill in each tree's best path and its finished hypotheses, best first."""
    for tree, done, chosen in zip(trees, finished, best, strict=True):
        tree.best = tree.path(chosen.node)
        ranked = sorted(done, key=lambda h: h.ranking, reverse=True)
        tree.hypotheses = [
            FinishedHypothesis(
                node=h.node, tokens=pointers.backtrack(h)[0], score=h.score, ranking=h.ranking
            )
            for h in ranked
        ]
