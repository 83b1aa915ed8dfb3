"""Named presets: the model shape and training recipe of each shipped model.

``attnscope train --preset NAME`` starts from one of these; any flag overrides a field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainConfig:
    vocab_size: int = 8000  # joint SentencePiece vocabulary per language pair
    byte_fallback: bool = False  # lossless tokenizer: byte pieces, split digits, no normalisation
    batch_tokens: int = 4096  # padded tokens per batch (longer side)
    lr: float = 1e-3  # peak learning rate
    warmup_steps: int = 1000  # linear warm-up, then inverse square root decay
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    weight_decay: float = 0.0
    max_epochs: int = 40
    max_steps: int | None = None
    max_time_s: float | None = None  # wall-clock budget for the training loop
    patience: int = 8  # early stopping: epochs without a better validation BLEU
    average_last: int = 5  # also try the average of the last N epoch checkpoints (0: off)
    seed: int = 1
    eval_beam: int = 5
    max_train_tokens: int = 100  # longer training pairs are dropped
    # R-Drop (Liang et al. 2021): each batch goes through the model twice (two dropout masks)
    # and the symmetric KL between the two output distributions is added, times this weight.
    rdrop_alpha: float = 0.0
    # Sequence-level distillation (Kim & Rush 2016): a file of ``source<TAB>translation`` lines
    # (``attnscope distill`` writes it from a teacher), added to the training pairs.
    distill_file: str | None = None
    # Copy augmentation (attnscope.training.copies): this fraction of the training pairs comes again
    # with numbers, names or emoji put in on both sides, from the corpus's word alignments.
    copy_augment: float = 0.0


PRESETS: dict[str, dict[str, Any]] = {
    "transformer": {
        "model": dict(
            architecture="transformer", d_model=256, heads=8, ff_dim=1024,
            encoder_layers=3, decoder_layers=3, dropout=0.25, pre_norm=True,
        ),
        "train": dict(lr=1e-3, warmup_steps=800, max_epochs=60, patience=10),
    },
    "rnn": {
        "model": dict(architecture="rnn", score="additive", emb_dim=256, hidden_dim=384, dropout=0.3),
        "train": dict(lr=1e-3, warmup_steps=200, max_epochs=40, patience=6),
    },
    "self-attentive": {
        "model": dict(architecture="self_attentive_rnn", score="additive", emb_dim=256, hidden_dim=384, dropout=0.3),
        "train": dict(lr=1e-3, warmup_steps=200, max_epochs=40, patience=6),
    },
    # A few seconds on a CPU: for tests and for trying the pipeline end to end.
    "tiny": {
        "model": dict(
            architecture="transformer", d_model=32, heads=2, ff_dim=64, encoder_layers=1,
            decoder_layers=1, emb_dim=32, hidden_dim=32, dropout=0.0,
        ),
        "train": dict(vocab_size=200, batch_tokens=512, lr=3e-3, warmup_steps=10, max_epochs=2, average_last=0),
    },
}
