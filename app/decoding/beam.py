"""Beam search, batched over sentences, with attention rows that follow the beam back-pointers.

Each step extends every live hypothesis's history (tokens, log-probabilities and attention rows)
and then selects the surviving parents with ``index_select``, so the matrices returned with a
hypothesis are exactly the rows computed along its own path. Ranking uses the GNMT length penalty
``score / ((5 + |y|) / 6) ** alpha``; a sentence stops when it has ``beam_size`` finished
hypotheses (or at the length limit, where live ones are finished as they are).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from app.decoding.output import DecodeOutput, max_target_length, never_emit, stack_padded
from app.nn.base import Seq2Seq, reorder_encoder


@dataclass
class _Finished:
    norm_score: float
    score: float
    tokens: Tensor  # (T,)
    logprobs: Tensor  # (T,)
    cross: Tensor | None  # (L, H, T, S)
    decoder_self: Tensor | None  # (L, H, T, limit)


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
    max_length: int | None = None,
) -> DecodeOutput:
    """src: (B, S) padded source ids. Returns the best hypothesis of each sentence."""
    if beam_size < 1:
        raise ValueError("beam_size must be at least 1")
    c, k, device = model.config, beam_size, src.device
    batch = src.size(0)
    enc = model.encode(src, need_weights=need_weights)
    src_lengths = enc.mask.sum(1)
    limit = max_length or max_target_length(src_lengths, max_len_ratio, max_len_offset, None)
    enc_k = reorder_encoder(enc, torch.arange(batch, device=device).repeat_interleave(k))
    state = model.init_state(enc_k)
    n = batch * k
    scores = torch.full((n,), float("-inf"), device=device)
    scores[::k] = 0.0  # only the first beam of each sentence is alive at the start
    tokens = torch.full((n,), c.bos_id, dtype=torch.long, device=device)
    hist_tokens = torch.empty(n, 0, dtype=torch.long, device=device)
    hist_lp = torch.empty(n, 0, device=device)
    hist_cross: Tensor | None = None  # (N, L, H, t, S)
    hist_self: Tensor | None = None  # (N, L, H, t, limit)
    finished: list[list[_Finished]] = [[] for _ in range(batch)]
    done = [False] * batch

    for t in range(limit):
        step, state = model.step(tokens, state, enc_k, need_weights=need_weights)
        log_probs = never_emit(step.log_probs, c.pad_id, c.bos_id)  # (N, V)
        vocab = log_probs.size(-1)
        if step.cross is not None:
            row = step.cross.unsqueeze(3)  # (N, L, H, 1, S)
            hist_cross = row if hist_cross is None else torch.cat([hist_cross, row], 3)
        if step.decoder_self is not None:
            row = torch.nn.functional.pad(step.decoder_self, (0, limit - t - 1)).unsqueeze(3)
            hist_self = row if hist_self is None else torch.cat([hist_self, row], 3)

        candidates = (scores[:, None] + log_probs).view(batch, k * vocab)
        top_scores, top_idx = candidates.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K)
        parents_local, words = (top_idx // vocab).tolist(), (top_idx % vocab).tolist()
        top_list = top_scores.tolist()
        last = t == limit - 1

        parents, next_tokens, next_scores = [], [], []
        for b in range(batch):
            keep: list[tuple[int, int, float]] = []
            if not done[b]:
                for j, (p_local, w, sc) in enumerate(zip(parents_local[b], words[b], top_list[b], strict=True)):
                    if sc == float("-inf"):
                        continue
                    parent = b * k + p_local
                    if w == c.eos_id:
                        if j < k:
                            finished[b].append(
                                _snapshot(parent, w, sc, log_probs, hist_tokens, hist_lp, hist_cross, hist_self, alpha)
                            )
                    elif len(keep) < k:
                        keep.append((parent, w, sc))
                if last:  # out of budget: live hypotheses finish as they are
                    for parent, w, sc in keep:
                        finished[b].append(
                            _snapshot(parent, w, sc, log_probs, hist_tokens, hist_lp, hist_cross, hist_self, alpha)
                        )
                if len(finished[b]) >= k or last:
                    done[b] = True
            if done[b]:
                keep = []
            while len(keep) < k:  # dead slots: any parent, never chosen again
                keep.append((b * k, c.pad_id, float("-inf")))
            for parent, w, sc in keep:
                parents.append(parent)
                next_tokens.append(w)
                next_scores.append(sc)
        if all(done):
            break
        index = torch.tensor(parents, device=device)
        tokens = torch.tensor(next_tokens, device=device)
        scores = torch.tensor(next_scores, device=device)
        step_lp = log_probs[index, tokens]  # (N,)
        hist_tokens = torch.cat([hist_tokens.index_select(0, index), tokens[:, None]], 1)
        hist_lp = torch.cat([hist_lp.index_select(0, index), step_lp[:, None]], 1)
        hist_cross = None if hist_cross is None else hist_cross.index_select(0, index)
        hist_self = None if hist_self is None else hist_self.index_select(0, index)
        state = state.reorder(index)

    best = [max(f, key=lambda h: h.norm_score) for f in finished]
    length = max(int(h.tokens.numel()) for h in best)
    cross = decoder_self = None
    if best[0].cross is not None:
        cross = stack_padded([h.cross.transpose(-1, -2) for h in best], length).transpose(-1, -2)  # type: ignore[union-attr]
    if best[0].decoder_self is not None:
        rows = [h.decoder_self[..., :length] for h in best]  # type: ignore[index]
        decoder_self = stack_padded([r.transpose(-1, -2) for r in rows], length).transpose(-1, -2)
    return DecodeOutput(
        tokens=stack_padded([h.tokens for h in best], length, pad_value=c.pad_id).long(),
        lengths=torch.tensor([h.tokens.numel() for h in best], device=device),
        source_lengths=src_lengths,
        scores=torch.tensor([h.score for h in best], device=device),
        token_logprobs=stack_padded([h.logprobs for h in best], length),
        encoder_self=enc.encoder_self,
        cross=cross,
        decoder_self=decoder_self,
    )


def _snapshot(
    parent: int,
    word: int,
    score: float,
    log_probs: Tensor,
    hist_tokens: Tensor,
    hist_lp: Tensor,
    hist_cross: Tensor | None,
    hist_self: Tensor | None,
    alpha: float,
) -> _Finished:
    """Freeze hypothesis ``parent`` extended by ``word`` (its rows for this step are already in
    the extended histories)."""
    toks = torch.cat([hist_tokens[parent], hist_tokens.new_tensor([word])])
    lps = torch.cat([hist_lp[parent], log_probs[parent, word].reshape(1)])
    return _Finished(
        norm_score=score / length_penalty(int(toks.numel()), alpha),
        score=score,
        tokens=toks,
        logprobs=lps,
        cross=None if hist_cross is None else hist_cross[parent].clone(),
        decoder_self=None if hist_self is None else hist_self[parent].clone(),
    )
