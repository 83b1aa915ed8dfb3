"""Whole test sets as background jobs: translate every sentence, score each one, keep the table.

A job runs in-process on its own thread, in batches; its progress is the sentences done, it can be
cancelled between batches, and its table is written as Parquet to ``<id>.parquet.part`` and renamed
to ``<id>.parquet`` only when complete, so a cancelled or failed job leaves no file a reload could
mistake for a result (the ``.part`` file is removed).

Per sentence (sacreBLEU's sentence-level metrics, defaults: BLEU with exponential smoothing, chrF
cased): ``bleu``, ``chrf``; ``source_words``/``output_words`` (whitespace words); ``mean_logprob``
(mean log-probability of the output tokens, ``</s>`` included); and from the last decoder layer's
cross-attention averaged over heads (``</s>`` column excluded): ``coverage``, the share of source
pieces that are the most attended piece of at least one output step, and ``entropy``, the mean
over output steps of the row entropy divided by log of the number of source pieces (1 = uniform).
Both are None for a model without cross-attention.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor

from attnscope.translator import Translation, Translator

logger = logging.getLogger(__name__)

COLUMNS = (
    "index", "source", "reference", "output", "bleu", "chrf", "source_words", "output_words",
    "mean_logprob", "coverage", "entropy",
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


def sentence_row(index: int, source: str, reference: str | None, done: Translation) -> dict[str, Any]:
    """One table row (see the module docstring)."""
    logprobs = done.hypothesis.token_logprobs
    coverage, entropy = attention_stats(done.hypothesis.cross)
    has_ref = reference is not None
    return {
        "index": index,
        "source": source,
        "reference": reference,
        "output": done.text,
        "bleu": round(BLEU(effective_order=True).sentence_score(done.text, [reference]).score, 2) if has_ref else None,
        "chrf": round(CHRF().sentence_score(done.text, [reference]).score, 2) if has_ref else None,
        "source_words": len(source.split()),
        "output_words": len(done.text.split()),
        "mean_logprob": round(sum(logprobs) / len(logprobs), 4) if logprobs else None,
        "coverage": coverage,
        "entropy": entropy,
    }


@dataclass
class TestSetJob:
    """A job's state, as ``GET /api/testsets/jobs/{id}`` shows it."""

    __test__ = False  # not a pytest class

    id: str
    model: str
    name: str
    total: int
    done: int = 0
    state: str = "running"  # running, cancelling, done, cancelled, failed
    error: str | None = None
    path: Path | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def status(self) -> dict[str, Any]:
        return {
            "id": self.id, "model": self.model, "name": self.name, "total": self.total, "done": self.done,
            "state": self.state, "error": self.error,
        }  # fmt: skip


def write_table(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Rows -> Parquet at ``path``, through ``path.part`` renamed into place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows)) if rows else pa.table({c: [] for c in COLUMNS})
    partial = path.with_name(path.name + ".part")
    pq.write_table(table, partial)
    partial.replace(path)


def read_table(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


class TestSetJobs:
    """The server's test-set jobs; results under ``folder``."""

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, *, batch_size: int = 16) -> None:
        self.folder, self.batch_size = folder, batch_size
        self.jobs: dict[str, TestSetJob] = {}
        self._lock = threading.Lock()

    def start(
        self,
        translator: Translator,
        *,
        name: str,
        sources: Sequence[str],
        references: Sequence[str] | None,
        beam_size: int = 1,
    ) -> TestSetJob:
        """Start translating ``sources`` on a thread; ValueError if references do not match."""
        if references is not None and len(references) != len(sources):
            raise ValueError(f"{len(sources)} sources but {len(references)} references")
        if not sources:
            raise ValueError("the test set has no sentences")
        job = TestSetJob(uuid.uuid4().hex[:12], translator.loaded.id, name, len(sources))
        with self._lock:
            self.jobs[job.id] = job
        args = (job, translator, list(sources), None if references is None else list(references), beam_size)
        threading.Thread(target=self._run, args=args, name=f"testset-{job.id}", daemon=True).start()
        return job

    def _run(
        self, job: TestSetJob, translator: Translator, sources: list[str], references: list[str] | None, beam_size: int
    ) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{job.id}.parquet"
        rows: list[dict[str, Any]] = []
        try:
            for start in range(0, len(sources), self.batch_size):
                if job.cancel.is_set():
                    job.state = "cancelled"
                    return
                chunk = sources[start : start + self.batch_size]
                outs = translator.translate(chunk, beam_size=beam_size, need_weights=True)
                for k, done in enumerate(outs):
                    i = start + k
                    rows.append(sentence_row(i, sources[i], None if references is None else references[i], done))
                job.done = len(rows)
            if job.cancel.is_set():
                job.state = "cancelled"
                return
            write_table(rows, path)
            job.path, job.state = path, "done"
        except Exception as err:  # a job's failure is its state, never a dead thread unseen
            logger.exception("test set job %s failed", job.id)
            job.state, job.error = "failed", f"{type(err).__name__}: {err}"
        finally:
            path.with_name(path.name + ".part").unlink(missing_ok=True)

    def get(self, job_id: str) -> TestSetJob | None:
        return self.jobs.get(job_id)

    def cancel(self, job_id: str) -> TestSetJob | None:
        job = self.jobs.get(job_id)
        if job is not None and job.state == "running":
            job.cancel.set()
            job.state = "cancelling"
        return job
