"""Whole test sets as background jobs: translate every sentence, score each one, keep the table.

A job runs on its own thread, in batches: in this process, or on a Ray actor
(:class:`attnscope.executor.ModelActor`, the same :func:`score_batch` either way). Its progress is
the sentences done; it can be cancelled between batches. A finished job is written whole or not at all (:mod:`.testset_store`), so a cancelled,
failed or killed job leaves nothing a reload could mistake for a result; finished jobs are found
again after a restart.

Per sentence (sacreBLEU's sentence-level metrics, defaults: BLEU with exponential smoothing, chrF
cased): ``bleu``, ``chrf``; ``source_words``/``output_words`` (whitespace words); ``mean_logprob``
(mean log-probability of the output tokens, ``</s>`` included); and from the last decoder layer's
cross-attention averaged over heads (``</s>`` column excluded): ``coverage``, the share of source
pieces that are the most attended piece of at least one output step, and ``entropy``, the mean
over output steps of the row entropy divided by log of the number of source pieces (1 = uniform).
Both are None for a model without cross-attention. ``flags``, ``unattended`` and, with gold
links, ``align_counts`` (every head's counts) come from :mod:`.testset_align`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor

from attnscope.alignment.gold import GoldPair
from attnscope.alignment.rows import Rows
from attnscope.decoding.confidence import confidence_of
from attnscope.engine import testset_align as align
from attnscope.engine import testset_store as store
from attnscope.engine.testset_data import TestSet
from attnscope.translator import Translation, Translator

logger = logging.getLogger(__name__)

COLUMNS = (
    "index", "source", "reference", "output", "bleu", "chrf", "source_words", "output_words",
    "mean_logprob", "coverage", "entropy", "flags", "unattended", "align_counts",
)  # fmt: skip


def attention_stats(cross: Tensor | None) -> tuple[float | None, float | None]:
    """cross: (L, H, T, S) with the ``</s>`` key last -> (coverage, normalised entropy)."""
    if cross is None or cross.size(-1) < 2 or cross.size(-2) == 0:
        return None, None
    rows = cross[-1].float().mean(0)[:, :-1]  # (T, S - 1)
    s = rows.size(-1)
    coverage = len(set(rows.argmax(-1).tolist())) / s
    if s == 1:
        return coverage, 0.0
    p = rows / rows.sum(-1, keepdim=True).clamp(min=1e-12)
    entropy = -(p * p.clamp(min=1e-12).log()).sum(-1) / math.log(s)
    return round(coverage, 4), round(float(entropy.mean()), 4)


def sentence_row(
    index: int, source: str, reference: str | None, done: Translation
) -> dict[str, Any]:
    """One table row without flags or alignment (see the module docstring)."""
    logprobs = done.hypothesis.token_logprobs
    coverage, entropy = attention_stats(done.hypothesis.cross)
    return {
        "index": index,
        "source": source,
        "reference": reference,
        "output": done.text,
        "bleu": round(BLEU(effective_order=True).sentence_score(done.text, [reference]).score, 2)
        if reference is not None
        else None,
        "chrf": round(CHRF().sentence_score(done.text, [reference]).score, 2) if reference is not None else None,
        "source_words": len(source.split()),
        "output_words": len(done.text.split()),
        "mean_logprob": round(sum(logprobs) / len(logprobs), 4) if logprobs else None,
        "coverage": coverage,
        "entropy": entropy,
    }


@dataclass(frozen=True)
class Batch:
    """Consecutive sentences of a job from ``start``: what :func:`score_batch` needs (picklable)."""

    start: int
    sources: list[str]
    references: list[str] | None
    gold: list[GoldPair] | None
    beam_size: int = 1
    rows: Rows = "produces"


def score_batch(translator: Translator, batch: Batch) -> list[dict[str, Any]]:
    """Translate and score one batch: its table rows (every column of :data:`COLUMNS`)."""
    loaded = translator.loaded
    outs = translator.translate(batch.sources, beam_size=batch.beam_size, need_weights=True)
    cross = align.has_cross(loaded)
    rows = []
    for k, done in enumerate(outs):
        reference = None if batch.references is None else batch.references[k]
        row = sentence_row(batch.start + k, batch.sources[k], reference, done)
        unattended = align.never_attended(done, loaded.tokenizer) if cross else None
        low = confidence_of(done.hypothesis.token_logprobs, getattr(loaded, "card", {}) or {})[
            "low"
        ]
        row["flags"] = align.flags_of(row, unattended, low)
        row["unattended"] = unattended
        pair = None if batch.gold is None else batch.gold[k]
        row["align_counts"] = (
            align.head_counts(loaded, pair, batch.rows) if cross and pair is not None else None
        )
        rows.append(row)
    return rows


@dataclass
class TestSetJob:
    """A job's state, as ``GET /api/testsets/jobs/{id}`` shows it (``info``: what the finished
    table says about itself: heads per layer, the alignment rows convention, the beam)."""

    __test__ = False  # not a pytest class

    id: str
    model: str
    name: str
    total: int
    done: int = 0
    state: str = "running"  # running, cancelling, done, cancelled, failed
    error: str | None = None
    path: Path | None = None
    created: float = field(default_factory=time.time)
    on_ray: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    cancel: threading.Event = field(default_factory=threading.Event)

    def status(self) -> dict[str, Any]:
        return {
            "id": self.id, "model": self.model, "name": self.name, "total": self.total, "done": self.done,
            "state": self.state, "error": self.error, "created": round(self.created, 3), "on_ray": self.on_ray,
            "aligned": bool(self.info.get("aligned")),
        }  # fmt: skip


class TestSetJobs:
    """The server's test-set jobs; finished tables under ``folder`` (reloaded from it on start).
    ``ray``: None in-process, ``"local"`` a local Ray, else a Ray address (``"auto"``)."""

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, *, batch_size: int = 16, ray: str | None = None) -> None:
        self.folder, self.batch_size, self.ray = folder, batch_size, ray
        self.jobs: dict[str, TestSetJob] = {}
        self._ray_lock, self._ray_started = threading.Lock(), False
        for meta, path in store.load_all(folder):
            job = TestSetJob(meta["id"], meta["model"], meta["name"], meta["total"], meta["total"], "done",
                             path=path, created=meta.get("created", 0.0), on_ray=meta.get("on_ray", False),
                             info=meta.get("info", {}))  # fmt: skip
            self.jobs[job.id] = job

    def start(
        self,
        translator: Translator,
        test_set: TestSet,
        *,
        beam_size: int = 1,
        rows: Rows = "produces",
    ) -> TestSetJob:
        """Start scoring ``test_set`` on a thread; ValueError for an empty set."""
        if not test_set.sources:
            raise ValueError("the test set has no sentences")
        loaded = translator.loaded
        job = TestSetJob(uuid.uuid4().hex[:12], loaded.id, test_set.name, len(test_set.sources))
        job.on_ray = self.ray is not None or _ray_is_up()
        job.info = {"beam_size": beam_size, "rows": rows, "aligned": test_set.gold is not None and align.has_cross(loaded),
                    "heads": align.cross_heads(loaded) if align.has_cross(loaded) else None}  # fmt: skip
        self.jobs[job.id] = job
        batches = [
            Batch(start, test_set.sources[start : start + self.batch_size],
                  None if test_set.references is None else test_set.references[start : start + self.batch_size],
                  None if test_set.gold is None else test_set.gold[start : start + self.batch_size], beam_size, rows)
            for start in range(0, len(test_set.sources), self.batch_size)
        ]  # fmt: skip
        threading.Thread(
            target=self._run, args=(job, translator, batches), name=f"testset-{job.id}", daemon=True
        ).start()
        return job

    def _run(self, job: TestSetJob, translator: Translator, batches: list[Batch]) -> None:
        rows: list[dict[str, Any]] = []
        try:
            for group in self._groups(job, translator, batches):
                rows.extend(r for batch_rows in group for r in batch_rows)
                job.done = len(rows)
            if job.cancel.is_set():
                job.state = "cancelled"
                return
            meta = {**job.status(), "state": "done", "done": len(rows), "info": job.info}
            job.path = store.save(self.folder, job.id, rows, meta)
            job.state = "done"
        except Exception as err:  # a job's failure is its state, never a dead thread unseen
            logger.exception("test set job %s failed", job.id)
            job.state, job.error = "failed", f"{type(err).__name__}: {err}"

    def _groups(
        self, job: TestSetJob, translator: Translator, batches: list[Batch]
    ) -> Iterator[list[list[dict[str, Any]]]]:
        """Yield each batch's rows, in this process or from a Ray actor, until cancelled."""
        if not job.on_ray:
            for batch in batches:
                if job.cancel.is_set():
                    return
                yield [score_batch(translator, batch)]
            return
        yield from _on_ray(self._join_ray(), job, Path(translator.loaded.path), batches)

    def _join_ray(self) -> str:
        """Join (or start) Ray once for all jobs, so one job ending never stops another's: the
        address for the runner ("" local)."""
        from attnscope.extras import join_ray

        address = "" if self.ray in (None, "local") else self.ray
        with self._ray_lock:
            if join_ray(
                address,
                cpus=max(2, os.cpu_count() or 1),
                log_to_driver=False,
                purpose="test-set jobs on Ray",
            ):
                self._ray_started = True
        return address

    def close(self) -> None:
        """Shut down a Ray these jobs started (a server keeps it while it runs)."""
        with self._ray_lock:
            if self._ray_started:
                import ray

                ray.shutdown()
                self._ray_started = False

    def get(self, job_id: str) -> TestSetJob | None:
        return self.jobs.get(job_id)

    def listing(self) -> list[TestSetJob]:
        """Every job, newest first."""
        return sorted(self.jobs.values(), key=lambda j: -j.created)

    def cancel(self, job_id: str) -> TestSetJob | None:
        job = self.jobs.get(job_id)
        if job is not None and job.state == "running":
            job.cancel.set()
            job.state = "cancelling"
        return job

    def rows(self, job: TestSetJob) -> list[dict[str, Any]]:
        """A done job's table (ValueError otherwise)."""
        if job.state != "done" or job.path is None:
            raise ValueError(
                f"test-set job {job.id} is {job.state}; its table exists only once done"
            )
        return store.read_rows(job.path)


def _on_ray(
    address: str, job: TestSetJob, model: Path, batches: list[Batch]
) -> Iterator[list[list[dict[str, Any]]]]:
    """One :class:`attnscope.executor.ModelActor` (the model loaded once, one torch thread, a GPU
    where the cluster has one) runs :func:`score_batch` on each batch, two in flight, so progress
    and cancellation move batch by batch. Ray is already up (``address``: "" local, else the
    cluster's, for the runner)."""
    import pickle

    import numpy as np
    import ray

    from attnscope.executor import ModelActor, Runner, actor_gpus

    actor = None
    try:
        runner = Runner(model.resolve(), ray=address, threads=1, progress=False)
        gpus = actor_gpus(ray, runner.device)
        actor = (
            ray.remote(ModelActor).options(num_cpus=1, num_gpus=gpus).remote(runner, score_batch)
        )

        def submit(i: int) -> Any:
            rows = {
                "index": np.array([i]),
                "batch": np.array([pickle.dumps(batches[i])], dtype=object),
            }
            return actor.__call__.remote(rows)  # type: ignore[attr-defined]  # Ray's handle

        pending = [submit(i) for i in range(min(2, len(batches)))]
        for i in range(len(batches)):
            if job.cancel.is_set():
                return
            out = ray.get(pending.pop(0))
            if i + 2 < len(batches):
                pending.append(submit(i + 2))
            yield [pickle.loads(out["result"][0])]
    finally:
        if actor is not None:
            ray.kill(actor)  # type: ignore[arg-type]  # Ray types the handle as the class


def _ray_is_up() -> bool:
    """Whether this process already runs on Ray (``serve --ray``): its jobs then use that Ray."""
    import sys

    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())


def with_best_head(
    rows: Sequence[dict[str, Any]], job: TestSetJob
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Rows with ``aer`` (the best head's, chosen on the held-out part) and ``heldout``, without
    the raw counts; and the choice (:func:`testset_align.choose_head`)."""
    heads = job.info.get("heads") or 1
    best = align.choose_head(rows, heads) if job.info.get("aligned") else None
    flat = None if best is None else best["layer"] * heads + best["head"]
    out = []
    for row in rows:
        shown = {k: v for k, v in row.items() if k != "align_counts"}
        shown["aer"] = None if flat is None else align.sentence_aer(row, flat)
        shown["heldout"] = align.held_out(row["index"]) if flat is not None else None
        out.append(shown)
    return out, best
