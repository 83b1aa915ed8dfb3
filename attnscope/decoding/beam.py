"""Beam search, batched over sentences, built on back-pointers.

Each step records, for the rows alive at that step only, the row's parent at the previous step,
the token it was extended with and that token's log-probability, plus the step's attention rows
(:class:`~attnscope.decoding.history.AttentionHistory`, unpadded). Nothing recorded is ever copied or
re-indexed again: memory and time grow linearly with the output length. A finished hypothesis is
a (step, row, token) triple; the returned one is backtracked once, at the end, and its attention
is gathered along its own path, so it is exactly the attention of that hypothesis.

A sentence stops when it has ``beam_size`` finished hypotheses (or at the length limit, where
live ones are finished as they are), and then leaves the batch. Ranking uses the GNMT length
penalty ``score / ((5 + |y|) / 6) ** alpha`` plus, when ``coverage_penalty`` (beta) is positive,
GNMT's coverage penalty ``beta * sum_i log(min(sum_j a_ji, 1))`` (Wu et al. 2016) computed from
the cross-attention; for the Transformer, ``a`` is the last decoder layer's cross-attention
averaged over its heads. The recorded steps are the beam tree: ``return_tree=True`` also returns
it (:mod:`attnscope.decoding.tree`), at no cost when not asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Unpack

import torch
from torch import Tensor

from attnscope.decoding.history import AttentionHistory, gnmt_coverage, last_layer_cross
from attnscope.decoding.output import (
    DEFAULT_ALPHA,
    DecodeOutput,
    check_stop,
    length_penalty,
    never_emit,
    plan_decoding,
    stack_padded,
)
from attnscope.decoding.plan import DecodeKw, DecodeOptions, DecodePlan, make_plan, options_of
from attnscope.decoding.steps import Candidate, DecodeStep, StepCallback
from attnscope.decoding.tree import FinishedHypothesis, SearchTree
from attnscope.nn import native
from attnscope.nn.base import Seq2Seq, reorder_encoder
from attnscope.nn.outputs import StepOutput

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


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    options: DecodeOptions | None = None,
    plan: DecodePlan | None = None,
    *,
    should_stop: Callable[[], bool] | None = None,
    on_step: StepCallback | None = None,
    **keywords: Unpack[DecodeKw],
) -> DecodeOutput:
    """src: (B, S) padded source ids. Returns the best hypothesis of each sentence.

    options (or the same by keyword, :class:`~attnscope.decoding.plan.DecodeOptions`): beam_size,
    alpha (the length penalty; None: 0.6), coverage_penalty (GNMT's beta; None or 0 disables
    it; needs a model with cross-attention), prefix (per sentence, target ids forced before the
    search starts: no pad, ``<s>``, ``</s>``), return_tree (also return each sentence's
    :class:`SearchTree`, ``DecodeOutput.trees``), max_length (one budget for all sentences or one
    per sentence: each sentence finishes at its own, exactly as if decoded alone with it).
    plan: which path runs (default: :func:`~attnscope.decoding.plan.make_plan`'s).
    should_stop: asked before every step; True raises DecodeStopped (a client gone, a deadline).
    on_step: called after every step with what it did (:mod:`attnscope.decoding.steps`)."""
    opts = options_of(options, keywords)
    if opts.beam_size < 1:
        raise ValueError("beam_size must be at least 1")
    beta = opts.coverage_penalty or 0.0
    if beta < 0:
        raise ValueError("coverage_penalty must not be negative")
    if beta > 0 and "cross" not in model.config.attention_kinds:
        raise ValueError("coverage_penalty needs a model with cross-attention")
    plan = plan or make_plan(model, src, opts, search="beam", streamed=on_step is not None)
    if plan.static:  # fixed shapes, each step a CUDA graph (attnscope/decoding/static_beam.py)
        from attnscope.decoding.static_beam import static_beam_search

        out = static_beam_search(model, src, opts, should_stop=should_stop)
        if out is not None:
            return out
    search = _Search(model, src, opts, plan)
    for t in range(search.limit):
        check_stop(should_stop, t)
        if not search.step(t, on_step):
            break
    return search.output(opts.prefix is not None)


class _Search:
    """One beam search's state between steps: the rows alive (``width`` per sentence still
    decoding), their scores, tokens and decoder state, the finished hypotheses and the records
    the best ones are backtracked through at the end."""

    def __init__(self, model: Seq2Seq, src: Tensor, options: DecodeOptions, plan: DecodePlan) -> None:
        c = self.config = model.config
        self.model, self.plan, self.k = model, plan, options.beam_size
        self.alpha = DEFAULT_ALPHA if options.alpha is None else options.alpha
        self.beta = options.coverage_penalty or 0.0
        batch, self.device = src.size(0), src.device
        self.prefixes, self.limits = plan_decoding(
            c, src, options.prefix, ratio=options.max_len_ratio, offset=options.max_len_offset,
            max_length=options.max_length,
        )  # fmt: skip
        self.limit = max(self.limits)
        self.need_weights = options.need_weights
        self.enc = model.encode(src, need_weights=options.need_weights)
        self.alive = list(range(batch))  # sentence of each group of ``width`` consecutive rows
        # The first step runs one row per sentence (its other beams would be copies of it, with no
        # score yet), as CTranslate2 does on the CPU; then model.expand_beams makes k of each.
        self.rows_enc, self.state = model.init_beams(self.enc, 1, path=self.plan.step)  # encoder rows: one per row, or per sentence
        self.width, self.expanded = 1, False  # rows per sentence at this step
        self.scores = torch.zeros(batch, device=self.device)
        self.host_scores = self.scores.tolist()
        self.tokens = torch.full((batch,), c.bos_id, dtype=torch.long, device=self.device)
        self.coverage = torch.zeros(batch, src.size(1), device=self.device) if self.beta > 0 else None
        self.history, self.pointers = AttentionHistory(), _BackPointers()
        self.finished: list[list[_Finished]] = [[] for _ in range(batch)]
        self.trees = [SearchTree.rooted(c.bos_id) for _ in range(batch)] if options.return_tree else None
        self.nodes = [0] * batch  # the tree node each row holds (the root at the start)

    def step(self, t: int, on_step: StepCallback | None) -> bool:
        """Run step ``t``: extend every live row, keep the best ``k`` of each sentence, finish
        hypotheses; False when no sentence is left."""
        step, self.state = self.model.step(self.tokens, self.state, self.rows_enc, need_weights=self.plan.record_weights)
        if self.need_weights:
            self.history.record(step)
        log_probs, ranked = self._rank(step)
        forced = _forced_tokens(self.alive, self.prefixes, t, self.width, log_probs)
        kept: list[_Candidate] = []
        ended: list[_Candidate] = []  # kept by sentences that finished at this step
        still_alive: list[int] = []
        for g, b in enumerate(self.alive):
            keep, last = self._select(t, g, b, forced, ranked)
            if len(self.finished[b]) >= self.k or last:
                ended += [] if last else keep
                continue  # this sentence is done and leaves the batch
            still_alive.append(b)
            kept += keep + [_Candidate(g * self.width, self.config.pad_id, NEG_INF, 0.0)] * (self.k - len(keep))
        if on_step is not None:
            on_step(self._report(t, log_probs, step, going=kept, ended=ended))
        if not still_alive:
            return False
        self._advance(kept, still_alive)
        return True

    def _rank(self, step: StepOutput) -> tuple[Tensor, _Ranked]:
        """The step's log-probabilities (N, V) and each sentence's ``2k`` best extensions."""
        c, log_probs = self.config, step.log_probs  # (N, V)
        vocab, groups = log_probs.size(-1), len(self.alive)
        count = min(2 * self.k, self.width * vocab)
        # (G, 2K) each: scores, flat indices row_in_group * V + word, log-probabilities
        banned = (c.pad_id, c.bos_id)
        ranked = native.top_candidates(self.scores, log_probs, groups, count, banned) if self.plan.native_search else None
        if ranked is None:
            log_probs = never_emit(log_probs, c.pad_id, c.bos_id, inplace=True)
            top_scores, top_idx = top_candidates(self.scores, log_probs, groups, count)
            top_lp = log_probs.view(groups, self.width * vocab).gather(1, top_idx)
        else:
            top_scores, top_idx, top_lp = ranked
        penalties = [0.0] * (groups * self.width)
        if self.coverage is not None:
            assert step.cross is not None
            self.coverage = self.coverage + last_layer_cross(step.cross)  # (N, S)
            mask = self.rows_enc.mask  # (N, S), or (G, S) when the model shares encoder rows
            mask = mask if mask.size(0) == self.coverage.size(0) else mask.repeat_interleave(self.k, 0)
            penalties = gnmt_coverage(self.coverage, mask, self.beta).tolist()
        flat = top_idx.tolist()  # row_in_group * vocab + word; split here, not by two tensor ops
        return log_probs, _Ranked(
            parents=[[i // vocab for i in row] for row in flat],
            words=[[i % vocab for i in row] for row in flat],
            scores=top_scores.tolist(),
            logprobs=top_lp.tolist(),
            penalties=penalties,
        )

    def _select(
        self, t: int, g: int, b: int, forced: dict[int, tuple[int, float]], ranked: _Ranked
    ) -> tuple[list[_Candidate], bool]:
        """Sentence ``b`` (group ``g``) at step ``t``: the rows it keeps (at most k) and whether
        its budget ends here; finished hypotheses are added to ``self.finished[b]``."""
        k, eos, last = self.k, self.config.eos_id, t == self.limits[b] - 1
        first = g * self.width  # the sentence's first row at this step
        finished, tree = self.finished[b], None if self.trees is None else self.trees[b]
        if g in forced:  # the prefix decides; only the first row is alive during it
            w, lp = forced[g]
            keep = [_Candidate(first, w, self.host_scores[first] + lp, lp)]
        else:
            keep = []
            candidates = zip(ranked.parents[g], ranked.words[g], ranked.scores[g], ranked.logprobs[g], strict=True)
            for j, (p_local, w, sc, lp) in enumerate(candidates):
                if sc == NEG_INF:
                    continue
                row = first + p_local
                if w == eos:
                    if j < k:
                        ranking = sc / length_penalty(t + 1, self.alpha) + ranked.penalties[row]
                        finished.append(_Finished(t, row, w, lp, sc, ranking))
                        if tree is not None:
                            finished[-1].node = tree.add(parent=self.nodes[row], token=w, logprob=lp, score=sc, finished=True)
                elif len(keep) < k:
                    keep.append(_Candidate(row, w, sc, lp))
        if tree is not None:
            for x in keep:
                x.node = tree.add(parent=self.nodes[x.parent], token=x.token, logprob=x.logprob, score=x.score, finished=last)
        if last:  # out of budget: live hypotheses finish as they are
            for x in keep:
                ranking = x.score / length_penalty(t + 1, self.alpha) + ranked.penalties[x.parent]
                finished.append(_Finished(t, x.parent, x.token, x.logprob, x.score, ranking, x.node))
        return keep, last

    def _report(
        self, t: int, log_probs: Tensor, step: StepOutput, *, going: list[_Candidate], ended: list[_Candidate]
    ) -> DecodeStep:
        """Step ``t`` as :class:`DecodeStep`: the rows kept for the next step (``going``, dead
        slots as None), those kept by sentences that finished here (``ended``), and the
        hypotheses that finished. log_probs: (N, V)."""
        done = [f for b in self.alive for f in self.finished[b] if f.step == t]
        return DecodeStep(
            step=t,
            sentences=[b for b in self.alive for _ in range(self.width)],
            log_probs=log_probs,
            cross=step.cross if self.need_weights else None,
            decoder_self=step.decoder_self if self.need_weights else None,
            chosen=[
                None if x.score == NEG_INF else Candidate(x.parent, x.token, x.logprob, x.score, x.node)
                for x in going
            ],
            ended=[Candidate(x.parent, x.token, x.logprob, x.score, x.node) for x in ended],
            finished=[Candidate(f.row, f.token, f.logprob, f.score, f.node, f.ranking) for f in done],
            encoder_self=self.enc.encoder_self if t == 0 else None,
            beam=True,
        )

    def _advance(self, kept: list[_Candidate], still_alive: list[int]) -> None:
        """Make the kept rows the next step's: back-pointers, tokens, scores, decoder state."""
        k, device = self.k, self.device
        self.pointers.add_step(kept)
        self.nodes = [x.node for x in kept]
        index = torch.tensor([x.parent for x in kept], device=device)
        self.tokens = torch.tensor([x.token for x in kept], device=device)
        self.host_scores = [x.score for x in kept]
        self.scores = torch.tensor(self.host_scores, device=device)
        if self.coverage is not None:
            self.coverage = self.coverage.index_select(0, index)
        if not self.expanded:  # after the first step: k rows per sentence from here on
            self.rows_enc, self.state = self.model.expand_beams(self.rows_enc, self.state, index, k)
            self.width, self.expanded = k, True
        else:
            self.state = self.state.reorder(index)
            if len(still_alive) < len(self.alive):  # sentences left: drop their encoder rows
                per_sentence = self.rows_enc.mask.size(0) == len(self.alive)
                self.rows_enc = reorder_encoder(self.rows_enc, index[::k] // k if per_sentence else index)
        self.alive = still_alive

    def output(self, prefixed: bool) -> DecodeOutput:
        """Each sentence's best hypothesis, backtracked, with the attention along its path."""
        c, device = self.config, self.device
        best = [max(f, key=lambda h: h.ranking) for f in self.finished]
        paths = [self.pointers.backtrack(h) for h in best]
        cross = decoder_self = None
        if self.need_weights:
            cross, decoder_self = self.history.gather([rows for _, _, rows in paths])
        if self.trees is not None:
            _close_trees(self.trees, self.finished, self.pointers, best)
        length = max(len(toks) for toks, _, _ in paths)
        tokens = stack_padded([torch.tensor(toks) for toks, _, _ in paths], length, pad_value=c.pad_id)
        return DecodeOutput(
            tokens=tokens.long().to(device),
            lengths=torch.tensor([len(toks) for toks, _, _ in paths], device=device),
            source_lengths=self.enc.mask.sum(1),
            scores=torch.tensor([h.score for h in best], device=device),
            token_logprobs=stack_padded([torch.tensor(lps) for _, lps, _ in paths], length).to(device),
            encoder_self=self.enc.encoder_self,
            cross=cross,
            decoder_self=decoder_self,
            forced_tokens=[len(p) for p in self.prefixes] if prefixed else None,
            trees=self.trees,
        )


@dataclass
class _Ranked:
    """A step's best extensions per sentence (group): the parent row within the group, the
    word, the new score and the word's log-probability; and each row's coverage penalty."""

    parents: list[list[int]]
    words: list[list[int]]
    scores: list[list[float]]
    logprobs: list[list[float]]
    penalties: list[float]


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
