"""``attnscope evaluate --ablate``: test BLEU with each attention head switched off in turn
(Michel et al. 2019), stored in the card as ``[layer][head]`` grids per attention kind."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from app.nn.ablation import disabled_heads
from app.training.data import load_parallel
from app.training.evaluate import bleu_scores, translate_corpus
from app.translator import Translator

logger = logging.getLogger(__name__)


def head_grid(kind: str, layers: int, heads: int) -> list[tuple[str, int, int]]:
    return [(kind, layer, head) for layer in range(layers) for head in range(heads)]


def ablation_bleu(
    translator: Translator,
    data_dir: str | Path,
    *,
    split: str = "test2016",
    kinds: Sequence[str] | None = None,
    beam_size: int = 5,
    progress: bool = True,
) -> dict[str, Any]:
    """Lowercased BLEU of ``split`` with the model as trained and with each head of ``kinds``
    (default: every kind the model has) switched off alone. Encoder kinds have the encoder's
    layer count, decoder kinds the decoder's."""
    loaded = translator.loaded
    config = loaded.config
    kinds = list(kinds or config.attention_kinds)
    unknown = [k for k in kinds if k not in config.attention_kinds]
    if unknown:
        raise ValueError(f"{loaded.id} has no {', '.join(unknown)} attention; it has {', '.join(config.attention_kinds) or 'none'}")
    pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]

    def bleu() -> float:
        hyps = translate_corpus(translator, sources, beam_size=beam_size, progress=False)
        return float(bleu_scores(hyps, references)["lowercase_13a"])

    baseline = bleu()
    grids: dict[str, list[list[float]]] = {}
    for kind in kinds:
        layers = int(getattr(config, "encoder_layers", 1)) if kind == "encoder_self" else config.layers
        heads = head_grid(kind, layers, config.num_heads)
        scores: dict[tuple[int, int], float] = {}
        for ref in tqdm(heads, desc=f"ablate {loaded.id} {kind}", disable=not progress, leave=False):
            with disabled_heads(loaded.model, [ref]):
                scores[ref[1:]] = bleu()
        grids[kind] = [[scores[(la, h)] for h in range(config.num_heads)] for la in range(layers)]
        logger.info("%s %s: BLEU with each head off %s (all on %.2f)", loaded.id, kind, grids[kind], baseline)
    return {
        "split": split,
        "beam_size": beam_size,
        "bleu_convention": "sacreBLEU lowercased 13a",
        "baseline": baseline,
        "bleu_without_head": grids,
    }
