"""Alignment-supervised attention (Garg et al. 2019, "Jointly Learning to Align and Translate with
Transformer Models"): one chosen cross-attention head is trained towards the reference alignment
with an extra, weighted loss term; the translation loss is unchanged.

For target piece ``t`` of word ``w`` the reference distribution spreads evenly over the source
pieces of the source words linked to ``w``; target pieces of unaligned words and ``</s>`` rows are
not supervised. The loss is the cross-entropy between that distribution and the head's attention
row of the step that *produces* ``t`` (or, with ``rows="reads"``, of the next step, whose input is
``t``: see attnscope.alignment.heads), averaged over supervised rows. Pieces are mapped to the
reference's words by character offsets at run time, so any tokenizer works with the same links.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from attnscope.alignment.corpus import AlignedPair, load_references
from attnscope.alignment.heads import build_word_map
from attnscope.alignment.rows import ROWS, Rows
from attnscope.nn.ablation import attention_module
from attnscope.nn.attention import MultiHeadAttention
from attnscope.nn.config import EOS_ID, ModelConfig
from attnscope.text.tokenizer import Tokenizer
from attnscope.training.data import Example

PieceLinks = list[tuple[int, int, float]]  # (target piece, source piece, weight)


@dataclass
class AlignedExample(Example):
    """A training example with its reference alignment over pieces."""

    links: PieceLinks = field(default_factory=list)


@dataclass(frozen=True)
class HeadSupervision:
    """Which cross-attention head is supervised, how strongly, and where the references are."""

    layer: int
    head: int
    weight: float = 1.0
    align_dir: str = ""
    rows: Rows = "produces"
    # Train only this head's query and key projections (its slices of the layer's q_proj and
    # k_proj) and freeze the rest of the model: the head learns to align, every other head and
    # layer keeps its weights, so the translation changes only through what this head reads.
    only_head: bool = False

    def check(self, config: ModelConfig) -> None:
        """ValueError naming the problem if the head does not exist in ``config``'s model."""
        if config.architecture != "transformer":
            raise ValueError("alignment supervision needs a Transformer (its cross-attention heads)")
        if not (0 <= self.layer < config.layers and 0 <= self.head < config.num_heads):
            raise ValueError(
                f"no cross-attention head L{self.layer}H{self.head}: the model has "
                f"{config.layers} layers x {config.num_heads} heads"
            )
        if self.weight <= 0:
            raise ValueError(f"alignment loss weight must be positive, got {self.weight}")
        if self.rows not in ROWS:
            raise ValueError(f"unknown row convention {self.rows!r}; choose one of {', '.join(ROWS)}")

    def references(self, split: str, source_lang: str, target_lang: str, count: int) -> list[AlignedPair]:
        return load_references(Path(self.align_dir), split, source_lang, target_lang, expected=count)


def piece_links(tokenizer: Tokenizer, source: str, target: str, src_ids: list[int], tgt_ids: list[int],
                ref: AlignedPair) -> PieceLinks:
    """The reference distribution of each aligned target piece over source pieces (ids without
    ``</s>``): rows sum to one."""
    words = build_word_map(tokenizer.pieces, source, target, src_ids, tgt_ids, ref.source_words, ref.target_words)
    src_pieces_of: dict[int, list[int]] = {}
    for s, w in enumerate(words.source):
        src_pieces_of.setdefault(w, []).append(s)
    out: PieceLinks = []
    for t, w in enumerate(words.target):
        pieces = sorted({s for i, j in ref.links if j == w for s in src_pieces_of.get(i, [])})
        out.extend((t, s, 1.0 / len(pieces)) for s in pieces)
    return out


def encode_aligned(
    pairs: Sequence[tuple[str, str]], references: Sequence[AlignedPair], tokenizer: Tokenizer, max_tokens: int
) -> list[AlignedExample]:
    """Like ``attnscope.training.data.encode_pairs`` (same filtering), each example with its piece links."""
    out = []
    for (src, tgt), ref in zip(pairs, references, strict=True):
        s, t = tokenizer.encode(src), tokenizer.encode(tgt)
        if 0 < len(s) <= max_tokens and 0 < len(t) <= max_tokens:
            out.append(AlignedExample(s + [EOS_ID], t + [EOS_ID], piece_links(tokenizer, src, tgt, s, t, ref)))
    return out


def alignment_targets(
    examples: Sequence[Example], tgt_len: int, src_len: int, device: torch.device | str, rows: Rows = "produces"
) -> Tensor:
    """(B, T, S) reference distributions of a collated batch, one row per decoder step (zero rows
    are not supervised): piece ``t``'s links go on row ``t`` (the step producing it) or, for
    ``rows="reads"``, on row ``t + 1`` (the step reading it; a piece is never the last input, as
    ``</s>`` follows it, so every aligned piece has that row)."""
    shift = 1 if rows == "reads" else 0
    targets = torch.zeros(len(examples), tgt_len, src_len)
    for b, ex in enumerate(examples):
        for t, s, w in getattr(ex, "links", ()):
            targets[b, t + shift, s] = w
    return targets.to(device)


def head_alignment_loss(attention: Tensor, targets: Tensor) -> Tensor:
    """attention: (B, T, S) one head's rows; targets: (B, T, S) reference distributions.
    Mean over supervised rows of -sum_s target * log attention (0 when no row is supervised)."""
    rows = targets.sum(-1) > 0  # (B, T)
    log_attn = attention.float().clamp(min=1e-9).log()
    per_row = -(targets * log_attn).sum(-1)  # (B, T)
    return per_row[rows].sum() / rows.sum().clamp(min=1)


def trainable_head_parameters(model: nn.Module, supervision: HeadSupervision) -> list[Tensor]:
    """For ``only_head``: freeze every parameter of ``model`` except the supervised head's query
    and key projections, whose gradients are masked to the head's rows of them; returns those
    parameters (the optimiser's, to be given no weight decay: decoupled decay would shrink the
    other heads' rows of the same tensors)."""
    attn = attention_module(model, "cross", supervision.layer)
    assert isinstance(attn, MultiHeadAttention)
    for frozen in model.parameters():
        frozen.requires_grad_(False)
    rows = slice(supervision.head * attn.head_dim, (supervision.head + 1) * attn.head_dim)
    mask = torch.zeros(attn.heads * attn.head_dim, 1, device=attn.q_proj.weight.device)
    mask[rows] = 1.0
    out: list[Tensor] = []
    for proj in (attn.q_proj, attn.k_proj):
        for p in (proj.weight, proj.bias):
            p.requires_grad_(True)
            shaped = mask if p.dim() == 2 else mask[:, 0]
            p.register_hook(lambda grad, m=shaped: grad * m)
            out.append(p)
    return out
