"""``attnscope evaluate --ablate``: test BLEU with each attention head switched off in turn
(Michel et al. 2019), stored in the card as ``[layer][head]`` grids per attention kind.

Each configuration (the model as trained, then each head off alone) is one unit of work of
:func:`attnscope.executor.run_batches`: in this process, or with ``--ray`` on Ray actors that
each hold the model once; the driver scores every translation with the same BLEU, so the card's
``ablation`` section is the same either way (at equal torch thread counts)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from attnscope.executor import Runner, run_batches
from attnscope.nn.ablation import HeadTuple, disabled_heads
from attnscope.training.data import load_parallel
from attnscope.training.evaluate import bleu_scores, translate_corpus
from attnscope.translator import Translator

logger = logging.getLogger(__name__)

BASELINE: HeadTuple = ("", -1, -1)  # the configuration with every head on


def head_grid(kind: str, layers: int, heads: int) -> list[tuple[str, int, int]]:
    return [(kind, layer, head) for layer in range(layers) for head in range(heads)]


def kind_layers(config: Any, kinds: Sequence[str] | None, model_id: str) -> dict[str, int]:
    """Each kind to ablate (default: every kind the model has) with its layer count: the
    encoder's for ``encoder_self``, the decoder's otherwise; ValueError naming a missing kind."""
    kinds = list(kinds or config.attention_kinds)
    unknown = [k for k in kinds if k not in config.attention_kinds]
    if unknown:
        raise ValueError(f"{model_id} has no {', '.join(unknown)} attention; it has {', '.join(config.attention_kinds) or 'none'}")
    return {kind: int(getattr(config, "encoder_layers", 1)) if kind == "encoder_self" else config.layers for kind in kinds}


def split_pairs(loaded: Any, data_dir: str | Path, split: str) -> tuple[list[str], list[str]]:
    """(sources, references) of ``split`` in the model's language pair."""
    pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
    return [s for s, _ in pairs], [t for _, t in pairs]


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Lowercased sacreBLEU (13a), the number the ablation grids hold."""
    return float(bleu_scores(list(hypotheses), list(references))["lowercase_13a"])


def ablation_result(split: str, beam_size: int, baseline: float, grids: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The card's ``ablation`` section."""
    return {
        "split": split,
        "beam_size": beam_size,
        "bleu_convention": "sacreBLEU lowercased 13a",
        "baseline": baseline,
        "bleu_without_head": grids,
    }


def translate_without(translator: Translator, head: HeadTuple, *, sources: list[str], beam_size: int) -> list[str]:
    """``sources`` translated with ``head`` switched off (every head on for :data:`BASELINE`)."""
    off = disabled_heads(translator.loaded.model, [head]) if head != BASELINE else nullcontext()
    with off:
        return translate_corpus(translator, sources, beam_size=beam_size, progress=False)


def ablation_bleu(
    translator: Translator,
    data_dir: str | Path,
    *,
    split: str = "test2016",
    kinds: Sequence[str] | None = None,
    beam_size: int = 5,
    progress: bool = True,
    runner: Runner | None = None,
) -> dict[str, Any]:
    """Lowercased BLEU of ``split`` with the model as trained and with each head of ``kinds``
    (default: every kind the model has) switched off alone. Encoder kinds have the encoder's
    layer count, decoder kinds the decoder's. ``runner`` None or in-process: ``translator``
    translates; a runner with ``ray`` set runs each configuration on a Ray actor holding the
    model folder ``translator.loaded.path``."""
    loaded = translator.loaded
    config = loaded.config
    layers_of = kind_layers(config, kinds, loaded.id)
    sources, references = split_pairs(loaded, data_dir, split)
    heads = [ref for kind, layers in layers_of.items() for ref in head_grid(kind, layers, config.num_heads)]
    runner = runner or Runner(Path(loaded.path), progress=progress)
    if runner.ray is not None:
        logger.info("ablate %s on Ray: %d heads + baseline over %d actor(s)", loaded.id, len(heads), runner.actors)
    work = partial(translate_without, sources=sources, beam_size=beam_size)
    translations = run_batches(runner, work, [BASELINE, *heads], translator=translator, desc=f"ablate {loaded.id}")
    bleu = {ref: corpus_bleu(hyps, references) for ref, hyps in zip([BASELINE, *heads], translations, strict=True)}
    grids: dict[str, list[list[float]]] = {}
    for kind, layers in layers_of.items():
        grids[kind] = [[bleu[(kind, la, h)] for h in range(config.num_heads)] for la in range(layers)]
        logger.info("%s %s: BLEU with each head off %s (all on %.2f)", loaded.id, kind, grids[kind], bleu[BASELINE])
    return ablation_result(split, beam_size, bleu[BASELINE], grids)
