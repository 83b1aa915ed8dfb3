"""RNN encoder–decoders: a bidirectional GRU encoder (or the self-attentive RNN of
:mod:`attnscope.nn.self_attentive`) and a GRU decoder that attends with any score of
:mod:`attnscope.nn.scores`, or with none at all (the baseline that only sees the final encoder state).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnscope.nn import inference
from attnscope.nn.ablation import is_off
from attnscope.nn.base import Seq2Seq, StepPath
from attnscope.nn.config import RecurrentConfig, RNNConfig, SelfAttentiveRNNConfig
from attnscope.nn.outputs import EncoderOutput, Seq2SeqOutput, StepOutput
from attnscope.nn.recording import record
from attnscope.nn.scores import build_score, masked_softmax


@dataclass
class RNNState:
    """hidden: (N, H) the decoder GRU state."""

    hidden: Tensor

    def reorder(self, indices: Tensor) -> RNNState:
        return RNNState(self.hidden.index_select(0, indices))


class GRUEncoder(nn.Module):
    """Bidirectional GRU; its states are projected to the decoder size to serve as keys/values."""

    def __init__(self, config: RecurrentConfig) -> None:
        super().__init__()
        self.rnn = nn.GRU(config.emb_dim, config.hidden_dim, batch_first=True, bidirectional=True)
        self.to_memory = nn.Linear(2 * config.hidden_dim, config.hidden_dim)
        self.to_final = nn.Linear(2 * config.hidden_dim, config.hidden_dim)

    def forward(self, emb: Tensor, mask: Tensor, need_weights: bool = False) -> EncoderOutput:
        """emb: (B, S, E); mask: (B, S)."""
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, last = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=emb.size(1))  # (B, S, 2H)
        final = torch.tanh(self.to_final(torch.cat([last[0], last[1]], dim=-1)))  # (B, H)
        return EncoderOutput(memory=self.to_memory(out), mask=mask, final=final)


class RNNSeq2Seq(Seq2Seq):
    """GRU decoder with Bahdanau-style attention: the previous state s_{t-1} queries the encoder
    states, the context c_t feeds the GRU, and the output layer reads [s_t; c_t; y_{t-1}].
    With ``score == "none"`` the context is the fixed final encoder state (Cho et al. 2014)."""

    config: RNNConfig | SelfAttentiveRNNConfig

    def __init__(self, config: RNNConfig | SelfAttentiveRNNConfig, encoder: nn.Module | None = None) -> None:
        super().__init__()
        self.config = config
        e, h = config.emb_dim, config.hidden_dim
        self.embed = nn.Embedding(config.vocab_size, e, padding_idx=config.pad_id)
        nn.init.normal_(self.embed.weight, std=e**-0.5)  # tied output: keep initial logits small
        with torch.no_grad():
            self.embed.weight[config.pad_id].zero_()
        self.encoder = encoder if encoder is not None else GRUEncoder(config)
        self.score = (
            None
            if config.score == "none"
            else build_score(config.score, h, max_positions=config.max_source_positions)
        )
        self.cell = nn.GRUCell(e + h, h)
        self.pre_output = nn.Linear(h + h + e, e)
        self.dropout = nn.Dropout(config.dropout)

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        mask = self.source_mask(src)
        return self.encoder(self.dropout(self.embed(src)), mask, need_weights=need_weights)

    def init_state(self, enc: EncoderOutput, *, path: StepPath | None = None) -> RNNState:
        """An RNN has one step path (``path`` is ignored)."""
        assert enc.final is not None
        return RNNState(enc.final)

    def step(
        self, tokens: Tensor, state: RNNState, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, RNNState]:
        logits, hidden, weights = self._step(tokens, state.hidden, enc)
        cross = weights[:, None, None, :] if (need_weights and weights is not None) else None
        return StepOutput(torch.log_softmax(logits.float(), dim=-1), cross=cross), RNNState(hidden)

    def _step(self, tokens: Tensor, hidden: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor, Tensor | None]:
        """tokens: (N,), hidden: (N, H) -> logits (N, V), new hidden (N, H), weights (N, S)."""
        emb = self.dropout(self.embed(tokens))  # (N, E)
        if self.score is None:
            assert enc.final is not None
            context, weights = enc.final, None  # (N, H)
        else:
            scores = self.score(hidden, enc.memory)  # (N, S)
            weights = masked_softmax(scores, enc.mask)  # (N, S)
            context = torch.bmm(weights.unsqueeze(1), enc.memory).squeeze(1)  # (N, H)
            record(self.score, scores, enc.mask, context)  # only inside recording()
            if is_off(self.score):  # switched off by attnscope.nn.ablation
                context = torch.zeros_like(context)
        hidden = self.cell(torch.cat([emb, context], dim=-1), hidden)
        out = torch.tanh(inference.linear(self.pre_output, self.dropout(torch.cat([hidden, context, emb], dim=-1))))
        return self._logits(self.dropout(out)), hidden, weights

    def _logits(self, out: Tensor) -> Tensor:
        """out: (N, E) -> (N, V) through the tied embedding matrix; when decoding, as a cached
        product (:mod:`attnscope.nn.inference`: packed fp16 for the shipped fp16 weights, where MKL is
        slow on the few rows of a beam)."""
        if inference.decoding():
            return inference.matrix_product(self.embed, "output", self.embed.weight)(out)
        return nn.functional.linear(out, self.embed.weight)

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False) -> Seq2SeqOutput:
        enc = self.encode(src, need_weights=need_weights)
        hidden = self.init_state(enc).hidden
        logits, rows = [], []
        for t in range(tgt_in.size(1)):
            step_logits, hidden, weights = self._step(tgt_in[:, t], hidden, enc)
            logits.append(step_logits)
            if weights is not None:
                rows.append(weights)
        cross = None
        if need_weights and rows:
            cross = torch.stack(rows, dim=1)[:, None, None]  # (B, 1, 1, T, S)
        return Seq2SeqOutput(
            logits=torch.stack(logits, dim=1),
            encoder_self=enc.encoder_self if need_weights else None,
            cross=cross,
        )
