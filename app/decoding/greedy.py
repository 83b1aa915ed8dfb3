"""Greedy decoding, batched over sentences, incremental (one decoder step per output token)."""

from __future__ import annotations

import torch
from torch import Tensor

from app.decoding.output import DecodeOutput, max_target_length, never_emit
from app.nn.base import Seq2Seq


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq,
    src: Tensor,
    *,
    need_weights: bool = True,
    max_len_ratio: float = 1.5,
    max_len_offset: int = 10,
    max_length: int | None = None,
) -> DecodeOutput:
    """src: (B, S) padded source ids (each ending with EOS). Stops when every sentence has
    produced EOS or after ``max_length`` (default ``ratio * S + offset``) tokens."""
    c = model.config
    enc = model.encode(src, need_weights=need_weights)
    state = model.init_state(enc)
    batch = src.size(0)
    src_lengths = enc.mask.sum(1)
    limit = max_length or max_target_length(src_lengths, max_len_ratio, max_len_offset, None)
    tokens = torch.full((batch,), c.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    lengths = torch.full((batch,), limit, dtype=torch.long, device=src.device)
    out_tokens, out_lp, cross_rows, self_rows = [], [], [], []
    for t in range(limit):
        step, state = model.step(tokens, state, enc, need_weights=need_weights)
        logp, tokens = never_emit(step.log_probs, c.pad_id, c.bos_id).max(dim=-1)  # (B,)
        tokens = tokens.masked_fill(done, c.pad_id)
        out_tokens.append(tokens)
        out_lp.append(logp.masked_fill(done, 0.0))
        if step.cross is not None:
            cross_rows.append(step.cross)
        if step.decoder_self is not None:
            self_rows.append(step.decoder_self)
        finished_now = tokens.eq(c.eos_id) & ~done
        lengths = torch.where(finished_now, torch.full_like(lengths, t + 1), lengths)
        done |= finished_now
        if bool(done.all()):
            break
    steps = len(out_tokens)
    return DecodeOutput(
        tokens=torch.stack(out_tokens, 1),
        lengths=lengths.clamp(max=steps),
        source_lengths=src_lengths,
        scores=torch.stack(out_lp, 1).sum(1),
        token_logprobs=torch.stack(out_lp, 1),
        encoder_self=enc.encoder_self,
        cross=torch.stack(cross_rows, 3) if cross_rows else None,  # (B, L, H, T, S)
        decoder_self=_square(self_rows) if self_rows else None,
    )


def _square(rows: list[Tensor]) -> Tensor:
    """Rows (N, L, H, t+1) of steps t = 0..T-1 -> (N, L, H, T, T), zero above the diagonal."""
    length = len(rows)
    return torch.stack([torch.nn.functional.pad(r, (0, length - r.size(-1))) for r in rows], 3)
