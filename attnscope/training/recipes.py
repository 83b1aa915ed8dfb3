"""Two recipe ingredients of the Transformers' training beyond label smoothing and dropout:

- **R-Drop** (Liang et al. 2021, "R-Drop: Regularized Dropout for Neural Networks"): every batch
  goes through the model twice with different dropout masks; the symmetric KL divergence
  between the two output distributions is added to the loss. It regularises small-data
  translation strongly (their IWSLT results) at the cost of a double forward pass, which we run
  as one batch of twice the rows.
- **Sequence-level knowledge distillation** (Kim & Rush 2016): a teacher's beam-search
  translations of the training sources are added to the training pairs
  (``attnscope distill`` writes them; ``TrainConfig.distill_file`` reads them).
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor
from torch.nn import functional as F

from attnscope.text.pieces import UNK_TEXT
from attnscope.training.data import DataError, read_lines


def doubled(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Each (B, ...) tensor stacked on itself -> (2B, ...): rows b and B + b are the same example."""
    return tuple(torch.cat([t, t], dim=0) for t in tensors)


def rdrop_kl(logits: Tensor, gold: Tensor, pad_id: int) -> Tensor:
    """Symmetric KL between the two halves of a doubled batch, summed over the target tokens.

    logits: (2B, T, V) from ``model(*doubled(src, tgt_in))``; gold: (B, T) with ``pad_id`` where
    there is no token. Returns ``sum_tokens (KL(p1 || p2) + KL(p2 || p1)) / 2`` (a scalar)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    first, second = logp.chunk(2, dim=0)  # (B, T, V) each
    kl = (first.exp() * (first - second) + second.exp() * (second - first)).sum(-1) / 2  # (B, T)
    return kl.masked_fill(gold.eq(pad_id), 0.0).sum()


def read_distilled(path: str | Path) -> list[tuple[str, str]]:
    """``source<TAB>translation`` lines (plain or ``.gz``) -> pairs; DataError names a bad line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"distillation file {path} does not exist (write it with `attnscope distill`)")
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(read_lines(path), start=1):  # read_lines: gzip, encoding, empty lines
        src, sep, tgt = line.partition("\t")
        if not sep or not src.strip() or not tgt.strip():
            raise DataError(f"{path}: line {number} is not 'source<TAB>translation'")
        pairs.append((src.strip(), tgt.strip()))
    if not pairs:
        raise DataError(f"{path} is empty")
    return pairs


def write_distilled(path: str | Path, sources: Sequence[str], translations: Sequence[str]) -> int:
    """Write the pairs whose translation is not empty (gzip when the name ends in .gz); returns
    how many were written. Written to a temporary name and renamed, so a crash leaves no half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    opener = gzip.open if path.suffix == ".gz" else open
    written = 0
    with opener(partial, "wt", encoding="utf-8") as f:
        for src, tgt in zip(sources, translations, strict=True):
            src, tgt = " ".join(src.split()), " ".join(tgt.split())  # no tab or newline inside
            if src and tgt:
                f.write(f"{src}\t{tgt}\n")
                written += 1
    partial.rename(path)
    return written


def distill(
    teacher: str | Path, corpus: str | Path, out: str | Path, *, split: str = "train", beam_size: int = 5,
    batch_size: int = 128, device: str | None = None,
) -> str:
    """Translate ``split``'s sources with the ``teacher`` model folder (its card's decoding
    defaults, beam ``beam_size``) and write them to ``out``, leaving out empty translations and
    those with an ``<unk>``; returns a one-line summary."""
    from attnscope.device import resolve_device
    from attnscope.repository import load_model_folder
    from attnscope.training.data import load_parallel
    from attnscope.training.evaluate import translate_corpus
    from attnscope.translator import Translator

    if beam_size < 1 or batch_size < 1:
        raise ValueError("--beam and --batch-size must be at least 1")
    loaded = load_model_folder(teacher, resolve_device(device))
    sources = [s for s, _ in load_parallel(corpus, split, loaded.source_lang, loaded.target_lang)]
    hyps = translate_corpus(Translator(loaded, max_source_tokens=10_000), sources, beam_size=beam_size,
                            batch_size=batch_size, progress=False)
    # An older (no byte fallback) teacher renders <unk> as UNK_TEXT; a student must not learn it.
    hyps = ["" if UNK_TEXT in h else h for h in hyps]
    written = write_distilled(out, sources, hyps)
    return f"{out}: {written} of {len(sources)} {split} sources translated by {loaded.id} (beam {beam_size})"
