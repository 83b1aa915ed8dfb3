"""A training run's inputs: where it reads and writes (:class:`TrainRun`), its tokenizer, and its
encoded corpus (training pairs with distilled, copy-augmented and aligned extras; validation)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from attnscope.alignment.corpus import AlignedPair, default_align_dir, load_references
from attnscope.nn.config import ModelConfig
from attnscope.text.tokenizer import Tokenizer
from attnscope.training.copies import augment_corpus
from attnscope.training.data import Example, encode_pairs, load_parallel, token_batches
from attnscope.training.distributed import World
from attnscope.training.presets import TrainConfig
from attnscope.training.recipes import read_distilled
from attnscope.training.supervision import HeadSupervision, encode_aligned

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainRun:
    """Where a training run reads and writes, and how it runs (what it trains is the
    :class:`ModelConfig` and :class:`TrainConfig`).

    ``run_dir`` keeps the checkpoints that ``resume`` continues from. ``init_from``: a model folder
    whose weights start the run (fine-tuning; pass its config and tokenizer too). ``supervision``:
    train one cross-attention head to align (Garg et al. 2019). ``align_dir``: the word
    alignments that copy augmentation reads (default beside the corpus)."""

    data_dir: str | Path
    out_dir: str | Path
    run_dir: str | Path
    source_lang: str = "en"
    target_lang: str = "de"
    tokenizer_path: str | Path | None = None
    device: str | None = None
    resume: bool = False
    evaluate_test: bool = True
    progress: bool = True
    init_from: str | Path | None = None
    supervision: HeadSupervision | None = None
    align_dir: str | Path | None = None

    def pairs(self, split: str) -> list[tuple[str, str]]:
        return load_parallel(self.data_dir, split, self.source_lang, self.target_lang)


@dataclass
class Corpus:
    """The encoded training and validation data of a run."""

    train_pairs: list[tuple[str, str]]
    val_pairs: list[tuple[str, str]]
    train_ex: list[Example]
    val_ex: list[Example]
    val_refs: list[AlignedPair]
    val_batches: list[list[int]]
    distilled: int = 0
    copied: int = 0


def load_tokenizer(run: TrainRun, config: TrainConfig, world: World, train_pairs: list[tuple[str, str]]) -> Tokenizer:
    """The run's tokenizer: resumed from ``run_dir``, given, or trained on the training pairs by
    rank 0 and written to ``run_dir`` for the other ranks."""
    tok_file = Path(run.run_dir) / "tokenizer.model"
    tokenizer: Tokenizer | None
    resumed = tok_file.is_file() and run.resume
    if resumed:  # every rank reads the run's file, so no rank may rewrite it (below)
        tokenizer = Tokenizer.load(tok_file)
    elif run.tokenizer_path:
        tokenizer = Tokenizer.load(run.tokenizer_path)
    elif not world.is_main:  # rank 0 trains it; the others read its file below
        tokenizer = None
    else:
        logger.info("training a %d-piece SentencePiece model on %d pairs", config.vocab_size, len(train_pairs))
        tokenizer = Tokenizer.train(
            [s for pair in train_pairs for s in pair],
            config.vocab_size,
            seed=config.seed,
            byte_fallback=config.byte_fallback,
        )
    if tokenizer is not None and world.is_main and not resumed:
        tokenizer.save(tok_file)
    world.barrier()
    return tokenizer or Tokenizer.load(tok_file)


def encode_corpus(run: TrainRun, config: TrainConfig, model_config: ModelConfig, tokenizer: Tokenizer, corpus: Corpus) -> None:
    """Fill ``corpus``'s examples: the training pairs (with their alignments when a head is
    supervised), distilled and copy-augmented pairs, and the validation pairs."""
    train_pairs, supervision = corpus.train_pairs, run.supervision
    if supervision is None:
        corpus.train_ex = encode_pairs(train_pairs, tokenizer.encode, config.max_train_tokens)
    else:
        supervision.check(model_config)
        refs = supervision.references("train", run.source_lang, run.target_lang, len(train_pairs))
        corpus.train_ex = list(encode_aligned(train_pairs, refs, tokenizer, config.max_train_tokens))
        corpus.val_refs = supervision.references("val", run.source_lang, run.target_lang, len(corpus.val_pairs))
    if config.distill_file:  # a teacher's translations of the sources, beside the references
        extra = encode_pairs(read_distilled(config.distill_file), tokenizer.encode, config.max_train_tokens)
        corpus.train_ex, corpus.distilled = corpus.train_ex + extra, len(extra)
        logger.info("added %d distilled pairs from %s", corpus.distilled, config.distill_file)
    if config.copy_augment > 0:  # numbers, names and emoji carried over (attnscope.training.copies)
        align_dir = run.align_dir or default_align_dir(run.data_dir)
        refs = load_references(align_dir, "train", run.source_lang, run.target_lang, len(train_pairs))
        augmented = augment_corpus(train_pairs, refs, config.copy_augment, seed=config.seed)
        extra = encode_pairs([(a.source, a.target) for a in augmented], tokenizer.encode, config.max_train_tokens)
        corpus.train_ex, corpus.copied = corpus.train_ex + extra, len(extra)
        logger.info("added %d copy-augmented pairs", corpus.copied)
    corpus.val_ex = encode_pairs(corpus.val_pairs, tokenizer.encode, 10_000)
    corpus.val_batches = token_batches(corpus.val_ex, config.batch_tokens, shuffle=False)
