"""``/api/testsets``: score a whole test set in the background (:mod:`attnscope.engine.testsets`).

``POST /jobs`` starts a job on a model with a shipped Multi30k split or the RWTH gold set
(``split``), or uploaded ``sources`` (optional ``references`` and ``alignments``); ``GET /jobs``
lists the jobs (finished ones survive a restart); ``GET /jobs/{id}`` is a job's progress,
``GET /jobs/{id}/rows`` its table, best head and corpus metrics once done, ``GET /jobs/{id}/slices``
its slices; ``GET /compare?a=&b=`` two jobs on the same sentences side by side; ``DELETE
/jobs/{id}`` cancels. Results live under the ``testsets_dir`` setting (docs/testsets.md)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from attnscope.alignment.rows import Rows
from attnscope.engine import testset_data as data
from attnscope.engine.schemas import ErrorResponse
from attnscope.engine.testset_report import compare, corpus_metrics, slices
from attnscope.engine.testsets import TestSetJob, TestSetJobs, with_best_head
from attnscope.serving.deps import ServiceDep

router = APIRouter(prefix="/api/testsets", tags=["api"])
MAX_SENTENCES = 5000
MAX_RUNNING = 4  # jobs at once: each is a thread decoding beside the served requests


class JobRequest(BaseModel):
    model: str = Field(description="A served model's id.")
    split: str | None = Field(
        default=None,
        description="A shipped Multi30k split (test2016, test2017, mscoco2017, val) or rwth-de-en, the gold set.",
    )
    sources: list[str] | None = Field(
        default=None, description="Uploaded source sentences (instead of split)."
    )
    references: list[str] | None = Field(
        default=None, description="Their references, one per source (optional)."
    )
    alignments: list[str] | None = Field(
        default=None,
        description="Gold links per pair (optional; needs references): Pharaoh 'i-j' sure, 'i?j' possible, from 0, "
        "over whitespace words of source and reference.",
    )
    beam_size: int = Field(default=1, ge=1, le=8)
    limit: int | None = Field(default=None, ge=1, description="Only the first N sentences.")
    rows: str = Field(
        default="produces",
        pattern="^(produces|reads)$",
        description="Alignment rows: produces or reads.",
    )


class JobStatus(BaseModel):
    id: str
    model: str
    name: str = Field(description="The split's name, rwth-de-en, or 'upload'.")
    total: int = Field(description="Sentences in the job.")
    done: int = Field(description="Sentences translated and scored so far.")
    state: str = Field(description="running, cancelling, done, cancelled or failed.")
    error: str | None = Field(default=None, description="Why a failed job failed.")
    created: float = Field(description="When the job started (Unix seconds).")
    on_ray: bool = Field(description="Whether it runs (ran) on Ray.")
    aligned: bool = Field(description="Whether its sentences have gold alignments scored per head.")


class JobList(BaseModel):
    jobs: list[JobStatus]


class JobTable(JobStatus):
    rows: list[dict[str, Any]] = Field(
        description="One row per sentence (docs/testsets.md names the columns)."
    )
    summary: dict[str, Any] = Field(
        description="Corpus BLEU/chrF (sacreBLEU), the best head's AER, flagged rows."
    )
    best_head: dict[str, Any] | None = Field(
        description="The head of lowest AER on the held-out part (every 5th sentence) and every head's scores on the rest."
    )


class SliceTable(JobStatus):
    by: str
    slices: list[dict[str, Any]]


class Comparison(BaseModel):
    a: JobStatus
    b: JobStatus
    summary: dict[str, dict[str, Any]] = Field(description="Corpus metrics of a and b.")
    rows: list[dict[str, Any]] = Field(description="a_*, b_* and delta_* (b − a) per sentence.")


ERR: dict[str, Any] = {"model": ErrorResponse}
NO_JOB: dict[int | str, dict[str, Any]] = {404: {**ERR, "description": "No such job."}}
NOT_DONE: dict[int | str, dict[str, Any]] = {409: {**ERR, "description": "The job is not done."}}
BAD_QUERY: dict[int | str, dict[str, Any]] = {
    422: {**ERR, "description": "A missing or invalid query parameter, named in `errors`."}
}


def jobs_of(request: Request) -> TestSetJobs:
    jobs = getattr(request.app.state, "testset_jobs", None)
    if jobs is None:
        settings = request.app.state.settings
        jobs = TestSetJobs(settings.testsets_dir, ray=settings.testsets_ray)
        request.app.state.testset_jobs = jobs
    return jobs


def _job(request: Request, job_id: str) -> TestSetJob:
    job = jobs_of(request).get(job_id)
    if job is None:
        raise HTTPException(404, f"no test-set job {job_id!r}")
    return job


def _best_flat(best: dict[str, Any] | None, job: TestSetJob) -> int | None:
    return None if best is None else best["layer"] * (job.info.get("heads") or 1) + best["head"]


async def _test_set(body: JobRequest, request: Request, loaded: Any) -> data.TestSet:
    settings = request.app.state.settings
    from attnscope.text.corpus import DataError

    try:
        if body.split == data.GOLD_SET:
            folder = data.gold_folder(settings.gold_dir, settings.data_dir)
            return await asyncio.to_thread(
                data.rwth, folder, loaded.source_lang, loaded.target_lang
            )
        if body.split is not None:
            return await asyncio.to_thread(
                data.split, settings.data_dir, body.split, loaded.source_lang, loaded.target_lang
            )
        return data.uploaded(body.sources or [], body.references, body.alignments)
    except (DataError, ValueError) as err:
        raise HTTPException(400, str(err)) from err


@router.post(
    "/jobs", status_code=202, response_model=JobStatus,
    responses={400: {**ERR, "description": "No such split, a missing gold set, or uploads that do not match."},
               404: {**ERR, "description": "Unknown model."},
               429: {**ERR, "description": "Too many jobs running at once."},
               422: {**ERR, "description": "A body that is not a job request."}},
)  # fmt: skip
async def start_job(body: JobRequest, request: Request, service: ServiceDep) -> dict[str, Any]:
    """Start a job; 400 naming the problem for a bad split or mismatched uploads."""
    if (body.split is None) == (body.sources is None):
        raise HTTPException(
            400,
            "give either split (a shipped test set or rwth-de-en) or sources (uploaded sentences)",
        )
    running = sum(j.state in ("running", "cancelling") for j in jobs_of(request).jobs.values())
    if running >= MAX_RUNNING:
        raise HTTPException(
            429,
            f"{running} test-set jobs are running (at most {MAX_RUNNING}); wait for one or cancel it",
        )
    served = service.get(body.model)
    test_set = (await _test_set(body, request, served.translator.loaded)).limited(body.limit)
    if len(test_set.sources) > MAX_SENTENCES:
        raise HTTPException(
            400,
            f"{len(test_set.sources)} sentences; a job takes at most {MAX_SENTENCES} (use limit)",
        )
    try:
        job = jobs_of(request).start(
            served.translator, test_set, beam_size=body.beam_size, rows=cast(Rows, body.rows)  # the pattern checked it
        )
    except ValueError as err:
        raise HTTPException(400, str(err)) from err
    return job.status()


@router.get("/jobs", response_model=JobList)
async def list_jobs(request: Request) -> dict[str, Any]:
    """Every job, newest first: running ones, and finished ones (also those of earlier runs of the server)."""
    return {"jobs": [j.status() for j in jobs_of(request).listing()]}


@router.get("/jobs/{job_id}", response_model=JobStatus, responses=NO_JOB)
async def job_status(job_id: str, request: Request) -> dict[str, Any]:
    return _job(request, job_id).status()


@router.get("/jobs/{job_id}/rows", response_model=JobTable, responses={**NO_JOB, **NOT_DONE})
async def job_rows(job_id: str, request: Request) -> dict[str, Any]:
    """The job's table; 409 while it runs or when it was cancelled or failed."""
    job = _job(request, job_id)
    raw = await asyncio.to_thread(_rows_or_409, request, job)
    rows, best = with_best_head(raw, job)
    summary = await asyncio.to_thread(corpus_metrics, raw, _best_flat(best, job))
    return {**job.status(), "rows": rows, "summary": summary, "best_head": best}


def _rows_or_409(request: Request, job: TestSetJob) -> list[dict[str, Any]]:
    try:
        return jobs_of(request).rows(job)
    except ValueError as err:
        raise HTTPException(409, str(err)) from err


@router.get(
    "/jobs/{job_id}/slices", response_model=SliceTable,
    responses={**NO_JOB, **NOT_DONE, **BAD_QUERY, 400: {**ERR, "description": "An unknown slice, or a word slice without a word."}},
)  # fmt: skip
async def job_slices(
    job_id: str,
    request: Request,
    by: str = Query(description="length, word or flag"),
    word: str | None = Query(default=None, description="The word, for by=word."),
) -> dict[str, Any]:
    """The job's slices with corpus BLEU/chrF and the best head's AER."""
    job = _job(request, job_id)
    raw = await asyncio.to_thread(_rows_or_409, request, job)
    _, best = with_best_head(raw, job)
    try:
        found = await asyncio.to_thread(slices, raw, by, word=word, best_flat=_best_flat(best, job))
    except ValueError as err:
        raise HTTPException(400, str(err)) from err
    return {**job.status(), "by": by, "slices": found}


@router.get(
    "/compare", response_model=Comparison,
    responses={**NO_JOB, **NOT_DONE, **BAD_QUERY, 400: {**ERR, "description": "Jobs on different sentences."}},
)  # fmt: skip
async def compare_jobs(
    request: Request,
    a: str = Query(description="A job id."),
    b: str = Query(description="Another job id."),
) -> dict[str, Any]:
    """Two finished jobs on the same sentences (two models, or two beams): a, b and b − a per sentence."""
    ja, jb = _job(request, a), _job(request, b)
    raw_a = await asyncio.to_thread(_rows_or_409, request, ja)
    raw_b = await asyncio.to_thread(_rows_or_409, request, jb)
    (rows_a, best_a), (rows_b, best_b) = with_best_head(raw_a, ja), with_best_head(raw_b, jb)
    try:
        merged = compare(rows_a, rows_b)
    except ValueError as err:
        raise HTTPException(400, str(err)) from err
    summary = {
        "a": await asyncio.to_thread(corpus_metrics, raw_a, _best_flat(best_a, ja)),
        "b": await asyncio.to_thread(corpus_metrics, raw_b, _best_flat(best_b, jb)),
    }
    return {"a": ja.status(), "b": jb.status(), "summary": summary, "rows": merged}


@router.delete("/jobs/{job_id}", response_model=JobStatus, responses=NO_JOB)
async def cancel_job(job_id: str, request: Request) -> dict[str, Any]:
    job = _job(request, job_id)
    jobs_of(request).cancel(job_id)
    return job.status()
