"""Decoding a decoder-only model after a prompt: greedy, sampling (temperature, top-k, top-p,
seeded) and beam search, with the key/value cache, returning the attention of every query the
model ran.

Beam search follows Hugging Face ``generate(num_beams=k)`` step for step (the same candidates,
finished-hypothesis bookkeeping, length normalisation ``score / generated_length**length_penalty``
and early-stopping heuristic), so both pick the same output on the same prompt ids. Attention rows
follow each hypothesis's back-pointers: the chosen output's matrix is the one its own prefix
produced.

The attention of a :class:`Generation` is the full causal matrix over the inputs the model ran:
the prompt and every output token but the last (which was never fed back), (L, H, n, n) with
n = prompt + output - 1. Row ``prompt - 1 + t`` is the query that chose output token t.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.nn.decoder_only import DecoderOnlyLM, KVCache, LMOutput

NEG = -1.0e9


@dataclass(frozen=True)
class Chosen:
    """A token the search took at a step: it extends row ``parent``; ``score`` is the row's
    summed log-probability with it; ``ranking`` (finished beam hypotheses) the length-normalised
    score the search ranks finished hypotheses by."""

    parent: int
    token: int
    logprob: float
    score: float
    ranking: float | None = None


@dataclass
class SearchStep:
    """One step of the search, as a stream reports it: output position ``step``; ``log_probs``
    (R, V) of its R live rows (greedy and sampling: 1; beam: 1 at the first step, then k);
    ``chosen``: per row of the next step, the token that extends a row of this one (empty when
    the search ends here); ``finished``: beam hypotheses that ended here; ``attention``
    (R, L, H, q, K) of the pass that gave these rows (the prompt's at the first step), whose
    last query is each row's choosing query, or None."""

    step: int
    log_probs: Tensor
    chosen: list[Chosen]
    finished: list[Chosen]
    attention: Tensor | None


# Hears each step, in the decode's thread (a stream's step events); it may raise to stop the
# decode (a client that left).
StepHook = Callable[[SearchStep], None]


@dataclass(frozen=True)
class LLMOptions:
    """How to decode: ``beam_size`` 1 is greedy (or sampling when ``sample``); ``seed`` makes a
    sample reproducible; ``top_k`` 0 and ``top_p`` 1.0 keep every token."""

    beam_size: int = 1
    max_new_tokens: int = 64
    length_penalty: float = 1.0
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    need_weights: bool = True

    def __post_init__(self) -> None:
        if self.beam_size < 1 or self.max_new_tokens < 1:
            raise ValueError("beam_size and max_new_tokens must be at least 1")
        if self.sample and (self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0):
            raise ValueError("sampling needs temperature > 0, 0 < top_p <= 1 and top_k >= 0")
        if self.sample and self.beam_size > 1:
            raise ValueError("sampling draws one output: use beam_size 1")


@dataclass
class Generation:
    """tokens: the output ids (the stop token included when produced); token_logprobs: the
    model's log-probability of each; score: the search's score; attention: (L, H, n, n) or None."""

    tokens: list[int]
    token_logprobs: list[float]
    score: float
    attention: Tensor | None


def assemble(rows: list[Tensor]) -> Tensor:
    """Row blocks (L, H, q_i, k_i), each query's keys starting at 0, -> (L, H, n, n) zero-padded."""
    n = sum(r.size(2) for r in rows)
    first = rows[0]
    full = first.new_zeros(first.size(0), first.size(1), n, n)
    at = 0
    for r in rows:
        full[:, :, at : at + r.size(2), : r.size(3)] = r
        at += r.size(2)
    return full


def warp(log_probs: Tensor, options: LLMOptions) -> Tensor:
    """(V,) log-probabilities -> sampling probabilities after temperature, top-k, then top-p."""
    logits = log_probs / options.temperature
    if options.top_k and options.top_k < logits.numel():
        kth = torch.topk(logits, options.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if options.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(ordered, -1).cumsum(-1)
        drop = cumulative - torch.softmax(ordered, -1) >= options.top_p  # keep the first token over p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return torch.softmax(logits, -1)


def forced_start(
    model: DecoderOnlyLM, prompt: list[int], forced: Sequence[int], need_weights: bool
) -> tuple[LMOutput, list[float]]:
    """One pass over ``prompt`` + ``forced`` (a what-if prefix of output tokens, read as the
    prompt is): its output and the log-probability the model gave each forced token."""
    out = model(torch.tensor([[*prompt, *forced]], device=model.device), need_weights=need_weights)
    if not forced:
        return out, []
    log_probs = torch.log_softmax(out.logits[0, len(prompt) - 1 : -1].float(), -1)  # (F, V)
    chosen = log_probs.gather(1, torch.tensor(list(forced), device=log_probs.device)[:, None])[:, 0]
    return out, chosen.tolist()


@torch.inference_mode()
def generate(
    model: DecoderOnlyLM, prompt: list[int], options: LLMOptions, *, forced: Sequence[int] = (),
    on_step: StepHook | None = None,
) -> Generation:  # fmt: skip
    """Decode after ``prompt`` (ids) until a stop token or ``max_new_tokens`` (``forced``
    included: the output starts with those tokens, then the search goes on from them)."""
    if len(forced) >= options.max_new_tokens:
        raise ValueError(f"the prefix has {len(forced)} tokens, leaving no room in {options.max_new_tokens}")
    if forced and forced[-1] in model.config.stop_ids:  # the prefix ends the output: nothing to search
        out, forced_logprobs = forced_start(model, prompt, forced, options.need_weights)
        n = len(prompt) + len(forced) - 1  # the stop token is never fed back
        weights = None if out.attention is None else out.attention[0, :, :, :n, :n]
        return Generation(list(forced), forced_logprobs, sum(forced_logprobs), weights)
    if options.beam_size > 1:
        return beam(model, prompt, options, forced=forced, on_step=on_step)
    stops = set(model.config.stop_ids)
    gen = torch.Generator(device="cpu").manual_seed(options.seed if options.seed is not None else 0)
    out, forced_logprobs = forced_start(model, prompt, forced, options.need_weights)
    rows = [out.attention[0]] if out.attention is not None else []
    tokens: list[int] = list(forced)
    logprobs: list[float] = list(forced_logprobs)
    for step in range(len(forced), options.max_new_tokens):
        log_probs = torch.log_softmax(out.logits[0, -1].float(), -1)
        if options.sample:
            token = int(torch.multinomial(warp(log_probs, options).cpu(), 1, generator=gen))
        else:
            token = int(log_probs.argmax())
        tokens.append(token)
        logprobs.append(float(log_probs[token]))
        if on_step is not None:
            chosen = [Chosen(0, token, logprobs[-1], sum(logprobs[len(forced) :]))]
            on_step(SearchStep(step, log_probs[None], chosen, [], out.attention))
        if token in stops or step == options.max_new_tokens - 1:
            break
        out = model(torch.tensor([[token]], device=model.device), cache=out.cache, need_weights=options.need_weights)
        if out.attention is not None:
            rows.append(out.attention[0])
    return Generation(tokens, logprobs, sum(logprobs), assemble(rows) if rows else None)


@dataclass
class _Hyp:
    tokens: list[int]
    logprobs: list[float]
    rows: list[Tensor]  # attention row blocks (L, H, q, k) of the queries it ran


def _report(
    on_step: StepHook, step: int, log_probs: Tensor, attention: Tensor | None,
    picked: tuple[Tensor, list[int], list[int], list[bool], list[int]], norm: float,
) -> None:  # fmt: skip
    """One beam step as a :class:`SearchStep`: ``picked`` = (the 2k candidates' scores, parents,
    tokens, whether each ends, the k that go on); ``norm``: the length penalty's divisor. At the
    first step only row 0 is live (the others are copies scored −inf)."""
    top, parents, tokens, hits, going = picked
    live = 1 if step == 0 else log_probs.size(0)

    def chosen(j: int, ranking: float | None = None) -> Chosen:
        return Chosen(parents[j], tokens[j], float(log_probs[parents[j], tokens[j]]), float(top[j]), ranking)

    onward = [] if all(hits) else [chosen(j) for j in going]
    ended = [chosen(j, float(top[j]) / norm) for j in range(len(going)) if hits[j]]
    on_step(SearchStep(step, log_probs[:live], onward, ended, None if attention is None else attention[:live]))


def _finish(finished: list[tuple[float, _Hyp]], new: list[tuple[float, _Hyp]], k: int) -> list[tuple[float, _Hyp]]:
    """The ``k`` best finished hypotheses, earlier ones first among equals (HF's merge)."""
    merged = finished + new
    order = sorted(range(len(merged)), key=lambda i: -merged[i][0])
    return [merged[i] for i in order[:k]]


@torch.inference_mode()
def beam(
    model: DecoderOnlyLM, prompt: list[int], options: LLMOptions, *, forced: Sequence[int] = (),
    on_step: StepHook | None = None,
) -> Generation:  # fmt: skip
    """Beam search of ``options.beam_size`` as Hugging Face's ``generate`` runs it. With
    ``forced`` the search starts after those tokens exactly as ``generate`` on prompt + forced
    does: lengths, scores and the budget count the continuation only (the score is its own)."""
    k, stops, lp = options.beam_size, set(model.config.stop_ids), options.length_penalty
    keep = max(2, 1 + len(stops)) * k
    budget = options.max_new_tokens - len(forced)
    out, forced_logprobs = forced_start(model, prompt, forced, options.need_weights)
    first = [out.attention[0]] if out.attention is not None else []
    cache: KVCache = out.cache.reorder(torch.zeros(k, dtype=torch.long, device=model.device))
    logits = out.logits[:, -1].expand(k, -1)
    running = [_Hyp(list(forced), list(forced_logprobs), list(first)) for _ in range(k)]
    scores = torch.tensor([0.0] + [NEG] * (k - 1), device=model.device)
    finished: list[tuple[float, _Hyp]] = []
    for step in range(budget):
        log_probs = torch.log_softmax(logits.float(), -1)  # (k, V)
        vocab = log_probs.size(-1)
        top, index = torch.topk((log_probs + scores[:, None]).reshape(-1), keep)
        parents, tokens = (index // vocab).tolist(), (index % vocab).tolist()
        length = step + 1
        hits = [t in stops or length == budget for t in tokens]
        grown = [_Hyp(running[p].tokens + [t], running[p].logprobs + [float(log_probs[p, t])], running[p].rows)
                 for p, t in zip(parents, tokens, strict=True)]  # fmt: skip
        new = [(float(top[j]) / length**lp, grown[j]) for j in range(k) if hits[j]]
        finished = _finish(finished, new, k)
        masked = top + torch.tensor(hits, device=top.device, dtype=top.dtype) * NEG
        chosen = torch.topk(masked, k).indices.tolist()
        if on_step is not None:
            _report(on_step, step, log_probs, out.attention, (top, parents, tokens, hits, chosen), length**lp)
        if all(hits):
            break
        scores = masked[chosen]
        running = [grown[j] for j in chosen]
        if len(finished) == k and float(scores[0]) / length**lp <= min(s for s, _ in finished):
            break
        cache = cache.reorder(torch.tensor([parents[j] for j in chosen], device=model.device))
        fed = torch.tensor([[h.tokens[-1]] for h in running], device=model.device)
        out = model(fed, cache=cache, need_weights=options.need_weights)
        cache, logits = out.cache, out.logits[:, -1]
        if out.attention is not None:
            for i, h in enumerate(running):
                h.rows = h.rows + [out.attention[i]]
    score, best = max(finished, key=lambda f: f[0]) if finished else (float(scores[0]), running[0])
    return Generation(best.tokens, best.logprobs, score, assemble(best.rows) if best.rows else None)
