"""``attnscope analyze --ray``: the same analysis as a Ray Data pipeline.

The driver reads the corpus and cuts it into the batches the in-process runner uses
(:func:`attnscope.analysis.corpus.batches`); each batch is one row of a Ray dataset, and
``map_batches`` hands the rows to a pool of actors that each hold the model once
(:class:`BatchAnalyzer`, on a GPU when the cluster has them) and return the rows of
:func:`attnscope.analysis.rows.analyze_batch`. The driver gathers and sorts them, so the Parquet is the
same as in-process. Without an address Ray starts locally with ``actors × threads + 1`` CPUs; with one, it
joins that cluster (every node needs ``attnscope[ray]`` and the model folder at the same path).
Ray is imported only here, and only when asked for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.analysis.corpus import Item, batches, dump_batch, load_batch
from attnscope.analysis.runner import MissingExtra, concat

if TYPE_CHECKING:
    from attnscope.analysis.runner import AnalyzeOptions

logger = logging.getLogger(__name__)


def import_ray() -> Any:
    """The ``ray`` module with Ray Data; MissingExtra naming the extra when it is not installed."""
    try:
        import ray
        import ray.data  # noqa: F401 - the part the pipeline uses
    except ImportError as err:
        raise MissingExtra(f"--ray needs Ray Data ({err}): pip install 'attnscope[ray]'") from err
    return ray


class BatchAnalyzer:
    """A Ray Data actor: loads the model once, then turns each row (a JSON batch of items) into
    analysis rows. The computation is :func:`attnscope.analysis.rows.analyze_batch`, as in-process."""

    def __init__(self, model: str, device: str | None, threads: int) -> None:
        import torch

        from attnscope.device import resolve_device
        from attnscope.repository import load_model_folder
        from attnscope.translator import Translator

        torch.set_num_threads(threads)
        self.translator = Translator(load_model_folder(model, resolve_device(device)))

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from attnscope.analysis.rows import analyze_batch, to_numpy

        parts = [to_numpy(analyze_batch(self.translator, load_batch(str(text)))) for text in rows["items"]]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def connect(ray: Any, address: str, cpus: int) -> bool:
    """Join the cluster at ``address``, or start a local Ray with ``cpus`` CPUs when it is empty;
    True if this call started or joined it (the caller then shuts it down), False if Ray was
    already up in this process."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    else:
        # The local workers import this checkout's ``app`` (an editable install may point elsewhere).
        root = str(Path(__file__).resolve().parents[2])
        ray.init(
            address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": root}},
        )  # fmt: skip
    return True


def start_ray(ray: Any, options: AnalyzeOptions) -> bool:
    """Connect to ``options.ray`` (an address) or start a local Ray; True if this call started it."""
    return connect(ray, options.ray or "", options.actors * (options.threads or 1) + 1)


def actor_gpus(ray: Any, device: str | None) -> int:
    """1 when the cluster has GPUs and ``device`` allows CUDA (unset or ``cuda...``), else 0."""
    return 1 if ray.cluster_resources().get("GPU", 0) >= 1 and (device is None or device.startswith("cuda")) else 0


def run_on_ray(options: AnalyzeOptions, items: Sequence[Item]) -> dict[str, np.ndarray]:
    """The rows of every batch of ``items``, computed by ``options.actors`` Ray actors."""
    ray = import_ray()
    if options.actors < 1:
        raise ValueError(f"--actors must be positive, got {options.actors}")
    begun = time.perf_counter()
    started = start_ray(ray, options)
    logger.info("ray: %s in %.1f s", "started" if started else "joined", time.perf_counter() - begun)
    try:
        device, threads = options.device, options.threads or 1
        gpus = actor_gpus(ray, device)
        chunks = [{"items": dump_batch(chunk)} for chunk in batches(items, options.batch_size)]
        logger.info("ray: %d batches over %d actor(s), %d GPU each", len(chunks), options.actors, gpus)
        dataset = ray.data.from_items(chunks, override_num_blocks=len(chunks))
        analysed = dataset.map_batches(
            BatchAnalyzer, batch_size=1, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=options.actors),
            fn_constructor_kwargs={"model": str(options.model.resolve()), "device": device, "threads": threads},
            num_cpus=threads, num_gpus=gpus,
        )  # fmt: skip
        parts = list(analysed.iter_batches(batch_size=None, batch_format="numpy"))
        return concat(parts)
    finally:
        if started:
            ray.shutdown()
