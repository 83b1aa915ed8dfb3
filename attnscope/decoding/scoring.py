"""Teacher-forced scoring: log-probability of each given target token, with attention."""

from __future__ import annotations

import torch
from torch import Tensor

from attnscope.decoding.output import DecodeOutput
from attnscope.nn.base import Seq2Seq


@torch.no_grad()
def score_targets(
    model: Seq2Seq, src: Tensor, tgt: Tensor, *, need_weights: bool = True
) -> DecodeOutput:
    """src: (B, S) padded source ids; tgt: (B, T) padded target ids ending with EOS.

    Runs the full forward pass on ``BOS + tgt[:-1]`` and returns per-token log-probabilities of
    ``tgt`` and the attention in the same form the decoders use."""
    c = model.config
    mask = tgt.ne(c.pad_id)
    bos = torch.full_like(tgt[:, :1], c.bos_id)
    tgt_in = torch.cat([bos, tgt[:, :-1]], dim=1).masked_fill(
        torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], 1).logical_not(), c.pad_id
    )
    out = model(src, tgt_in, need_weights=need_weights)
    log_probs = torch.log_softmax(out.logits.float(), dim=-1)
    token_lp = log_probs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)  # (B, T)
    return DecodeOutput(
        tokens=tgt,
        lengths=mask.sum(1),
        source_lengths=src.ne(c.pad_id).sum(1),
        scores=token_lp.sum(1),
        token_logprobs=token_lp,
        encoder_self=out.encoder_self,
        decoder_self=out.decoder_self,
        cross=out.cross,
    )
