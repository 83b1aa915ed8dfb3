"""``attnscope evaluate --ablate --ray [ADDRESS]``: head importance (test BLEU with each head
switched off in turn, :func:`attnscope.training.ablation.ablation_bleu`) as a Ray Data pipeline.

Each head to switch off (and one row for the model as trained) is a row of a Ray dataset;
``map_batches`` hands the rows to a pool of actors that each hold the model once
(:class:`HeadAblator`, on a GPU when the cluster has them) and translate the whole split with
that head off, exactly as in-process (``translate_corpus`` inside ``disabled_heads``). The driver
scores the translations with the same BLEU and builds the same grids, so the card's ``ablation``
section is the same as in-process (at equal torch thread counts: see
:class:`attnscope.analysis.runner.AnalyzeOptions`). Ray starts locally without an address
(``attnscope.analysis.distributed.connect``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnscope.analysis.distributed import actor_gpus, connect, import_ray
from attnscope.training.ablation import ablation_result, corpus_bleu, head_grid, kind_layers, split_pairs

logger = logging.getLogger(__name__)

BASELINE = ("", -1, -1)  # the row for the model with every head on


@dataclass(frozen=True)
class RayRun:
    """Where and how wide: ``address`` ``""`` for a local Ray, else a cluster's; ``actors``
    model-holding actors of ``threads`` torch threads each; the actors' ``device`` and
    ``quantize`` as ``load_model_folder`` takes them."""

    address: str = ""
    actors: int = 1
    threads: int = 1
    device: str | None = None
    quantize: str | None = None


class HeadAblator:
    """A Ray Data actor: loads the model once; each row names a head (``kind`` empty: none) and
    comes back with the split's translations with that head off, as JSON text."""

    def __init__(self, model: str, run: RayRun, sources: list[str], beam_size: int) -> None:
        import torch

        from attnscope.device import resolve_device
        from attnscope.repository import load_model_folder
        from attnscope.translator import Translator

        torch.set_num_threads(run.threads)
        loaded = load_model_folder(model, resolve_device(run.device), quantize=run.quantize)
        self.translator = Translator(loaded, max_source_tokens=10_000)
        self.sources, self.beam_size = sources, beam_size

    def translate(self, kind: str, layer: int, head: int) -> list[str]:
        """The split translated with head ``(kind, layer, head)`` off (all on when kind is empty)."""
        from contextlib import nullcontext

        from attnscope.nn.ablation import disabled_heads
        from attnscope.training.evaluate import translate_corpus

        off = disabled_heads(self.translator.loaded.model, [(kind, layer, head)]) if kind else nullcontext()
        with off:
            return translate_corpus(self.translator, self.sources, beam_size=self.beam_size, progress=False)

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = [json.dumps(self.translate(str(k), int(la), int(h))) for k, la, h in zip(rows["kind"], rows["layer"], rows["head"], strict=True)]
        return {**rows, "hypotheses": np.array(out, dtype=object)}


def ray_translations(model: Path, heads: Sequence[tuple[str, int, int]], sources: list[str], beam_size: int, run: RayRun
) -> dict[tuple[str, int, int], list[str]]:
    """Each head of ``heads`` (and :data:`BASELINE`) -> the split's translations with it off."""
    ray = import_ray()
    if run.actors < 1 or run.threads < 1:
        raise ValueError(f"--actors and --threads must be positive, got {run.actors} and {run.threads}")
    begun = time.perf_counter()
    started = connect(ray, run.address, run.actors * run.threads + 1)
    logger.info("ray: %s in %.1f s", "started" if started else "joined", time.perf_counter() - begun)
    try:
        rows = [{"kind": k, "layer": la, "head": h} for k, la, h in [BASELINE, *heads]]
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows))
        translated = dataset.map_batches(
            HeadAblator, batch_size=1, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=run.actors),
            fn_constructor_kwargs={"model": str(model.resolve()), "run": run, "sources": sources, "beam_size": beam_size},
            num_cpus=run.threads, num_gpus=actor_gpus(ray, run.device),
        )  # fmt: skip
        out: dict[tuple[str, int, int], list[str]] = {}
        for batch in translated.iter_batches(batch_size=None, batch_format="numpy"):
            for k, la, h, hyps in zip(batch["kind"], batch["layer"], batch["head"], batch["hypotheses"], strict=True):
                out[(str(k), int(la), int(h))] = json.loads(str(hyps))
        return out
    finally:
        if started:
            ray.shutdown()


def ablation_bleu_on_ray(
    loaded: Any,
    data_dir: str | Path,
    *,
    split: str = "test2016",
    kinds: Sequence[str] | None = None,
    beam_size: int = 5,
    run: RayRun | None = None,
) -> dict[str, Any]:
    """:func:`attnscope.training.ablation.ablation_bleu` of the model folder ``loaded.path``, each
    configuration translated by a Ray actor; the same dict."""
    run = run or RayRun()
    config = loaded.config
    layers_of = kind_layers(config, kinds, loaded.id)
    sources, references = split_pairs(loaded, data_dir, split)
    heads = [ref for kind, layers in layers_of.items() for ref in head_grid(kind, layers, config.num_heads)]
    logger.info("ablate %s on Ray: %d heads + baseline over %d actor(s)", loaded.id, len(heads), run.actors)
    translations = ray_translations(Path(loaded.path), heads, sources, beam_size, run)
    bleu = {ref: corpus_bleu(hyps, references) for ref, hyps in translations.items()}
    grids = {
        kind: [[bleu[(kind, la, h)] for h in range(config.num_heads)] for la in range(layers)]
        for kind, layers in layers_of.items()
    }
    return ablation_result(split, beam_size, bleu[BASELINE], grids)
