"""The self-attentive RNN encoder (Cheng, Dong & Lapata 2016), simplified to a simple RNN cell.

    h_0 = c_0 = 0
    h_t = tanh(A [x_t; c_{t-1}] + b)          the context replaces the previous state
    c_t = Σ_{i≤t} α_{t,i} h_i,   α_t = softmax_{i≤t} align(h_i, h_t)

so every state attends over its own past (and itself). The attention rows form a lower-triangular
``(S, S)`` matrix, returned as ``encoder_self``; the decoder then cross-attends over the h_t.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnscope.nn.ablation import is_off
from attnscope.nn.config import RecurrentConfig
from attnscope.nn.outputs import EncoderOutput
from attnscope.nn.recording import record
from attnscope.nn.scores import AdditiveScore, masked_softmax


class SelfAttentiveEncoder(nn.Module):
    def __init__(self, config: RecurrentConfig) -> None:
        super().__init__()
        h = config.hidden_dim
        self.hidden_dim = h
        self.cell = nn.Linear(config.emb_dim + h, h)  # A [x_t; c_{t-1}] + b
        self.align = AdditiveScore(h)

    def forward(self, emb: Tensor, mask: Tensor, need_weights: bool = False) -> EncoderOutput:
        """emb: (B, S, E); mask: (B, S) True for real tokens."""
        batch, length, _ = emb.shape
        context = emb.new_zeros(batch, self.hidden_dim)  # c_{t-1}
        states: list[Tensor] = []
        rows: list[Tensor] = []
        positions = torch.arange(length, device=emb.device)
        for t in range(length):
            h_t = torch.tanh(self.cell(torch.cat([emb[:, t], context], dim=-1)))  # (B, H)
            states.append(h_t)
            past = torch.stack(states, dim=1)  # (B, t+1, H)
            keys_ok = mask[:, : t + 1] | (positions[: t + 1] == 0)  # never an empty row
            scores = self.align(h_t, past)  # (B, t+1)
            alpha = masked_softmax(scores, keys_ok)  # (B, t+1)
            context = torch.bmm(alpha.unsqueeze(1), past).squeeze(1)  # (B, H)
            record(self.align, scores, keys_ok, context)  # only inside recording()
            if is_off(self.align):  # switched off by attnscope.nn.ablation
                context = torch.zeros_like(context)
            if need_weights:
                rows.append(nn.functional.pad(alpha, (0, length - t - 1)))  # (B, S)
        memory = torch.stack(states, dim=1)  # (B, S, H)
        last = (mask.sum(1) - 1).clamp(min=0)  # index of the last real token
        final = memory[torch.arange(batch, device=emb.device), last]  # (B, H)
        encoder_self = torch.stack(rows, dim=1)[:, None, None] if need_weights else None
        return EncoderOutput(memory=memory, mask=mask, final=final, encoder_self=encoder_self)
