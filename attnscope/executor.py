"""One model over many batches: in this process, or on Ray actors that each hold the model once.

The work is a function of a :class:`~attnscope.translator.Translator` (a
:class:`~attnscope.llm.translator.LLMTranslator` for a decoder-only folder) and one batch (a picklable
module-level function, or a ``functools.partial`` of one holding what every batch shares);
:func:`run_batches` returns its results in the batches' order, whichever runs them. Analysis
(``attnscope analyze``: a batch is a chunk of sentences) and head ablation (``evaluate
--ablate``: a batch is one head to switch off) both run through it, so ``--ray`` is the same
computation as in-process, and the numbers agree at equal torch thread counts (a reduction split
over more threads adds in another order).

On Ray each batch is one row of a Ray Data dataset; ``map_batches`` hands the rows to a pool of
``actors`` actors (:class:`ModelActor`, one GPU each when the cluster has GPUs and ``device``
allows CUDA), each with ``threads`` torch threads; without an address Ray starts locally
(:func:`attnscope.extras.join_ray`). Every node needs ``attnscope[ray]`` and the model folder at
the same path."""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from attnscope.extras import join_ray, require
from attnscope.llm.translator import LLMTranslator
from attnscope.translator import Translator

logger = logging.getLogger(__name__)
B = TypeVar("B")  # one batch
R = TypeVar("R")  # its result


@dataclass(frozen=True)
class Runner:
    """Where a model runs. ``ray`` None: in this process; ``""``: a local Ray; else a Ray address.
    ``actors``: model-holding Ray actors; ``threads``: torch threads in-process (None: leave them)
    or per actor (None: 1); ``device`` and ``quantize`` as ``load_model_folder`` takes them;
    ``max_source_tokens`` the translator's (None: its default)."""

    model: Path
    device: str | None = None
    quantize: str | None = None
    max_source_tokens: int | None = None
    ray: str | None = None
    actors: int = 1
    threads: int | None = None
    progress: bool = True

    def translator(self) -> Translator:
        """The model loaded as this runner says."""
        from attnscope.device import resolve_device
        from attnscope.repository import load_model_folder

        loaded = load_model_folder(self.model, resolve_device(self.device), quantize=self.quantize)
        if self.max_source_tokens is None:
            return Translator(loaded)
        return Translator(loaded, max_source_tokens=self.max_source_tokens)

    def load(self) -> Translator | LLMTranslator:
        """The folder's model as the work takes it: :meth:`translator`, or an
        :class:`~attnscope.llm.translator.LLMTranslator` for a decoder-only folder."""
        from attnscope.device import resolve_device
        from attnscope.llm.folder import is_llm_folder, load_llm_folder

        if is_llm_folder(self.model):
            return LLMTranslator(load_llm_folder(self.model, resolve_device(self.device)))
        return self.translator()


def run_batches(
    runner: Runner,
    work: Callable[[Any, B], R],
    batches: Sequence[B],
    *,
    translator: Translator | LLMTranslator | None = None,
    desc: str = "",
) -> list[R]:
    """``[work(translator, batch) for batch in batches]`` with ``runner``'s model: in this process
    (``translator`` if given, else loaded once), with a progress bar, or on Ray actors."""
    if runner.ray is None:
        return _in_process(runner, work, batches, translator or runner.load(), desc)
    return _on_ray(runner, work, batches)


def _in_process(
    runner: Runner, work: Callable[[Any, B], R], batches: Sequence[B], translator: Translator | LLMTranslator, desc: str
) -> list[R]:
    import torch
    from tqdm import tqdm

    threads = torch.get_num_threads()
    torch.set_num_threads(runner.threads or threads)
    try:
        return [
            work(translator, batch)
            for batch in tqdm(batches, desc=desc, unit="batch", disable=not runner.progress, leave=False)
        ]
    finally:
        torch.set_num_threads(threads)


class ModelActor:
    """A Ray Data actor: loads the model once, then runs ``work`` on each row's pickled batch."""

    def __init__(self, runner: Runner, work: Callable[[Any, Any], Any]) -> None:
        import torch

        torch.set_num_threads(runner.threads or 1)
        self.translator = runner.load()
        self.work = work

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = [pickle.dumps(self.work(self.translator, pickle.loads(batch))) for batch in rows["batch"]]
        return {"index": rows["index"], "result": np.array(results, dtype=object)}


def actor_gpus(ray: Any, device: str | None) -> int:
    """1 when the cluster has GPUs and ``device`` allows CUDA (unset or ``cuda...``), else 0."""
    return 1 if ray.cluster_resources().get("GPU", 0) >= 1 and (device is None or device.startswith("cuda")) else 0


def _on_ray(runner: Runner, work: Callable[[Any, B], R], batches: Sequence[B]) -> list[R]:
    ray = require("ray", "ray", purpose="--ray")
    require("ray.data", "ray", purpose="--ray")
    threads = runner.threads or 1
    if runner.actors < 1 or threads < 1:
        raise ValueError(f"--actors and --threads must be positive, got {runner.actors} and {threads}")
    begun = time.perf_counter()
    started = join_ray(runner.ray, cpus=runner.actors * threads + 1, log_to_driver=False, purpose="--ray")
    logger.info("ray: %s in %.1f s", "started" if started else "joined", time.perf_counter() - begun)
    try:
        gpus = actor_gpus(ray, runner.device)
        logger.info("ray: %d batches over %d actor(s), %d GPU each", len(batches), runner.actors, gpus)
        rows = [{"index": i, "batch": pickle.dumps(batch)} for i, batch in enumerate(batches)]
        dataset = ray.data.from_items(rows, override_num_blocks=max(1, len(rows)))
        done = dataset.map_batches(
            ModelActor, batch_size=1, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=runner.actors),
            fn_constructor_kwargs={"runner": replace(runner, model=runner.model.resolve()), "work": work},
            num_cpus=threads, num_gpus=gpus,
        )  # fmt: skip
        results: dict[int, R] = {}
        for batch in done.iter_batches(batch_size=None, batch_format="numpy"):
            for index, result in zip(batch["index"], batch["result"], strict=True):
                results[int(index)] = pickle.loads(result)
        return [results[i] for i in range(len(rows))]
    finally:
        if started:
            ray.shutdown()
