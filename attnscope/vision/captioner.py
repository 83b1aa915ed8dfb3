"""Show, Attend and Tell (Xu et al. 2015, soft attention) and the same captioner without
attention, for the 84×84 scenes.

Encoder: three conv3×3+ReLU blocks pooled by 2, 2 and 3 -> a 7×7 grid of annotation vectors
a_i. Decoder (an LSTM), at each word t:

    e_ti = w·tanh(W_a a_i + W_h h_{t-1}),  α_t = softmax(e_t)      additive attention
    z_t  = σ(f_β(h_{t-1})) · Σ_i α_ti a_i                          gated context
    h_t  = LSTM([E y_{t-1}; z_t], h_{t-1})
    p(y_t) ∝ exp(L_o(E y_{t-1} + L_h h_t + L_z z_t))               deep output

Without attention α_t is uniform (the context is the mean annotation), all else equal. The
loss adds the doubly stochastic regulariser λ Σ_i (1 - Σ_t α_ti)², which asks every region to
receive about one word's worth of attention over the caption."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnscope.vision.scenes import BOS_ID, EOS_ID, PAD_ID, SCENE, VOCAB

POOLS = (2, 2, 3)


@dataclass(frozen=True)
class CaptionerConfig:
    attention: bool = True
    canvas: int = SCENE
    channels: tuple[int, int, int] = (32, 64, 128)
    embed: int = 64
    hidden: int = 256
    attn_dim: int = 128
    vocab: int = len(VOCAB)
    max_len: int = 16
    dropout: float = 0.2
    doubly_stochastic: float = 1.0  # λ

    @property
    def grid(self) -> int:
        return self.canvas // (POOLS[0] * POOLS[1] * POOLS[2])

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "channels": list(self.channels)}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> CaptionerConfig:
        values = dict(data)
        values["channels"] = tuple(values["channels"])  # type: ignore[arg-type]
        return cls(**values)  # type: ignore[arg-type]


@dataclass
class CaptionOutput:
    """``logits`` (B, T, vocab) and ``attention`` (B, T, rows*cols): one distribution over the
    grid per predicted word (uniform for the captioner without attention)."""

    logits: Tensor
    attention: Tensor


class Encoder(nn.Module):
    def __init__(self, config: CaptionerConfig) -> None:
        super().__init__()
        ins = (1, *config.channels[:-1])
        self.convs = nn.ModuleList(nn.Conv2d(i, o, 3, padding=1) for i, o in zip(ins, config.channels, strict=True))

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 1, 84, 84) -> annotations (B, rows*cols, D), row-major over the grid."""
        x = images
        for conv, pool in zip(self.convs, POOLS, strict=True):
            x = F.max_pool2d(F.relu(conv(x)), pool)
        return x.flatten(2).transpose(1, 2)  # (B, L, D)


class Captioner(nn.Module):
    def __init__(self, config: CaptionerConfig) -> None:
        super().__init__()
        self.config = config
        d, h = config.channels[-1], config.hidden
        self.encoder = Encoder(config)
        self.embed = nn.Embedding(config.vocab, config.embed, padding_idx=PAD_ID)
        self.init_h = nn.Linear(d, h)
        self.init_c = nn.Linear(d, h)
        if config.attention:
            self.att_a = nn.Linear(d, config.attn_dim)
            self.att_h = nn.Linear(h, config.attn_dim, bias=False)
            self.att_v = nn.Linear(config.attn_dim, 1, bias=False)
        self.gate = nn.Linear(h, d)
        self.lstm = nn.LSTMCell(config.embed + d, h)
        self.out_h = nn.Linear(h, config.embed)
        self.out_z = nn.Linear(d, config.embed, bias=False)
        self.out = nn.Linear(config.embed, config.vocab)
        self.drop = nn.Dropout(config.dropout)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def start(self, images: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """Encode: -> annotations (B, L, D), their attention keys (B, L, A) (or an empty tensor
        without attention) and the initial LSTM state ((B, H), (B, H))."""
        ann = self.encoder(images)
        mean = ann.mean(1)
        keys = self.att_a(ann) if self.config.attention else ann.new_zeros(0)
        return ann, keys, (torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean)))

    def step(
        self, words: Tensor, ann: Tensor, keys: Tensor, state: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """One word: previous words (B,) -> (logits (B, vocab), α (B, L), new state)."""
        h, c = state
        if self.config.attention:
            scores = self.att_v(torch.tanh(keys + self.att_h(h)[:, None]))[..., 0]  # (B, L)
            alpha = scores.softmax(-1)
        else:
            alpha = ann.new_full(ann.shape[:2], 1.0 / ann.shape[1])
        z = torch.sigmoid(self.gate(h)) * torch.einsum("bl,bld->bd", alpha, ann)  # (B, D)
        e = self.embed(words)
        h, c = self.lstm(torch.cat([e, z], -1), (h, c))
        logits = self.out(self.drop(e + self.out_h(self.drop(h)) + self.out_z(z)))
        return logits, alpha, (h, c)

    def forward(self, images: Tensor, tokens: Tensor) -> CaptionOutput:
        """Teacher forcing: images (B, 1, 84, 84), target ids (B, T) ending in ``</s>`` (padded)
        -> predictions for each target position."""
        ann, keys, state = self.start(images)
        inputs = torch.cat([tokens.new_full((tokens.shape[0], 1), BOS_ID), tokens[:, :-1]], 1)
        logits, alphas = [], []
        for t in range(tokens.shape[1]):
            step_logits, alpha, state = self.step(inputs[:, t], ann, keys, state)
            logits.append(step_logits)
            alphas.append(alpha)
        return CaptionOutput(torch.stack(logits, 1), torch.stack(alphas, 1))


def caption_loss(out: CaptionOutput, tokens: Tensor, doubly_stochastic: float) -> tuple[Tensor, Tensor]:
    """(cross-entropy over the non-pad targets, λ Σ_i (1 - Σ_t α_ti)² averaged over the batch).
    tokens (B, T). The regulariser sums attention over the real words of each caption."""
    nll = F.cross_entropy(out.logits.flatten(0, 1), tokens.flatten(), ignore_index=PAD_ID)
    real = (tokens != PAD_ID).float()[..., None]  # (B, T, 1)
    coverage = (out.attention * real).sum(1)  # (B, L)
    reg = doubly_stochastic * ((1 - coverage) ** 2).sum(1).mean()
    return nll, reg


def _allowed(logits: Tensor) -> Tensor:
    """Log-probabilities with ``<pad>`` and ``<s>`` ruled out (a decoder never emits them)."""
    logits = logits.clone()
    logits[..., PAD_ID] = float("-inf")
    logits[..., BOS_ID] = float("-inf")
    return logits.log_softmax(-1)


@torch.no_grad()
def greedy(model: Captioner, images: Tensor, max_len: int | None = None) -> tuple[list[list[int]], list[Tensor]]:
    """Greedy decoding of a batch: per image its ids (``</s>`` included when reached) and the
    attention (T, L) of each emitted id."""
    ann, keys, state = model.start(images)
    b = images.shape[0]
    words = torch.full((b,), BOS_ID, dtype=torch.long, device=images.device)
    ids, alphas = [], []
    done = torch.zeros(b, dtype=torch.bool, device=images.device)
    for _ in range(max_len or model.config.max_len):
        logits, alpha, state = model.step(words, ann, keys, state)
        words = _allowed(logits).argmax(-1)
        ids.append(words)
        alphas.append(alpha)
        done |= words == EOS_ID
        if bool(done.all()):
            break
    id_rows = torch.stack(ids, 1).tolist()
    att = torch.stack(alphas, 1)
    out_ids, out_att = [], []
    for i, row in enumerate(id_rows):
        n = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
        out_ids.append(row[:n])
        out_att.append(att[i, :n])
    return out_ids, out_att


@torch.no_grad()
def beam_search(model: Captioner, image: Tensor, beam_size: int, max_len: int | None = None) -> tuple[list[int], Tensor]:
    """Beam search for one image (1, 1, 84, 84) -> (ids ending in ``</s>`` when reached,
    attention (T, L) of each id, following the beam's back-pointers). Finished hypotheses
    compete by mean log-probability per word; beam 1 equals greedy decoding."""
    ann, keys, state = model.start(image)
    beams: list[tuple[float, list[int], list[Tensor]]] = [(0.0, [], [])]
    states = state
    finished: list[tuple[float, list[int], list[Tensor]]] = []
    for _ in range(max_len or model.config.max_len):
        k = len(beams)
        last = torch.tensor([b[1][-1] if b[1] else BOS_ID for b in beams], device=image.device)
        logits, alpha, states = model.step(last, ann.expand(k, -1, -1), keys.expand(k, -1, -1) if keys.numel() else keys, states)
        logp = _allowed(logits) + torch.tensor([b[0] for b in beams], device=image.device)[:, None]
        top = logp.flatten().topk(min(beam_size, logp.numel()))
        survivors: list[tuple[float, list[int], list[Tensor]]] = []
        sources: list[int] = []
        for score, flat in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            src, word = divmod(flat, logp.shape[1])
            hyp = (score, [*beams[src][1], word], [*beams[src][2], alpha[src]])
            if word == EOS_ID:
                finished.append(hyp)
            else:
                survivors.append(hyp)
                sources.append(src)
        if not survivors or len(finished) >= beam_size:
            break
        beams = survivors
        index = torch.tensor(sources, device=image.device)
        states = (states[0][index], states[1][index])
    pool = finished or beams
    best = max(pool, key=lambda h: h[0] / len(h[1]))
    return best[1], torch.stack(best[2])
