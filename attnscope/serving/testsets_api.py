"""``/api/testsets/jobs``: score a whole test set in the background (:mod:`attnscope.engine.testsets`).

``POST`` starts a job on a model with a shipped Multi30k split (``split``) or uploaded
``sources`` (and optional ``references``); ``GET .../{id}`` is its progress; ``GET .../{id}/rows``
its table once done; ``DELETE .../{id}`` cancels it. Results are kept under the server's temporary
folder for its lifetime (``<tmp>/attnscope-testsets``)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from attnscope.engine.schemas import ErrorResponse
from attnscope.engine.testsets import TestSetJob, TestSetJobs, read_table
from attnscope.serving.deps import ServiceDep

router = APIRouter(prefix="/api/testsets", tags=["api"])
MAX_SENTENCES = 5000


class JobRequest(BaseModel):
    model: str = Field(description="A served model's id.")
    split: str | None = Field(default=None, description="A shipped Multi30k split: test2016, test2017, mscoco2017, val.")
    sources: list[str] | None = Field(default=None, description="Uploaded source sentences (instead of split).")
    references: list[str] | None = Field(default=None, description="Their references, one per source (optional).")
    beam_size: int = Field(default=1, ge=1, le=8)
    limit: int | None = Field(default=None, ge=1, description="Only the first N sentences.")


class JobStatus(BaseModel):
    id: str
    model: str
    name: str = Field(description="The split's name, or 'upload'.")
    total: int = Field(description="Sentences in the job.")
    done: int = Field(description="Sentences translated and scored so far.")
    state: str = Field(description="running, cancelling, done, cancelled or failed.")
    error: str | None = Field(default=None, description="Why a failed job failed.")


class JobTable(JobStatus):
    rows: list[dict[str, Any]] = Field(description="One row per sentence (docs/testsets.md names the columns).")


ERR = {"model": ErrorResponse}


def jobs_of(request: Request) -> TestSetJobs:
    jobs = getattr(request.app.state, "testset_jobs", None)
    if jobs is None:
        jobs = TestSetJobs(Path(tempfile.gettempdir()) / "attnscope-testsets")
        request.app.state.testset_jobs = jobs
    return jobs


def _job(request: Request, job_id: str) -> TestSetJob:
    job = jobs_of(request).get(job_id)
    if job is None:
        raise HTTPException(404, f"no test-set job {job_id!r}")
    return job


@router.post(
    "/jobs", status_code=202, response_model=JobStatus,
    responses={400: {**ERR, "description": "No such split, or sources and references that do not match."},
               404: {**ERR, "description": "Unknown model."},
               422: {**ERR, "description": "A body that is not a job request."}},
)  # fmt: skip
async def start_job(body: JobRequest, request: Request, service: ServiceDep) -> dict[str, Any]:
    """Start a job; 400 naming the problem for a bad split or mismatched uploads."""
    if (body.split is None) == (body.sources is None):
        raise HTTPException(400, "give either split (a shipped test set) or sources (uploaded sentences)")
    served = service.get(body.model)
    loaded = served.translator.loaded
    if body.split is not None:
        from attnscope.text.corpus import DataError, load_parallel

        try:
            pairs = await asyncio.to_thread(
                load_parallel, request.app.state.settings.data_dir, body.split, loaded.source_lang, loaded.target_lang
            )
        except DataError as err:
            raise HTTPException(400, str(err)) from err
        sources, references = [s for s, _ in pairs], [t for _, t in pairs]
        name = body.split
    else:
        sources, references, name = list(body.sources or []), body.references, "upload"
    if body.limit is not None:
        sources, references = sources[: body.limit], None if references is None else references[: body.limit]
    if len(sources) > MAX_SENTENCES:
        raise HTTPException(400, f"{len(sources)} sentences; a job takes at most {MAX_SENTENCES} (use limit)")
    try:
        job = jobs_of(request).start(served.translator, name=name, sources=sources, references=references, beam_size=body.beam_size)
    except ValueError as err:
        raise HTTPException(400, str(err)) from err
    return job.status()


@router.get("/jobs/{job_id}", response_model=JobStatus, responses={404: {**ERR, "description": "No such job."}})
async def job_status(job_id: str, request: Request) -> dict[str, Any]:
    return _job(request, job_id).status()


@router.get(
    "/jobs/{job_id}/rows", response_model=JobTable,
    responses={404: {**ERR, "description": "No such job."}, 409: {**ERR, "description": "The job is not done."}},
)  # fmt: skip
async def job_rows(job_id: str, request: Request) -> dict[str, Any]:
    """The job's table; 409 while it runs or when it was cancelled or failed."""
    job = _job(request, job_id)
    if job.state != "done" or job.path is None:
        raise HTTPException(409, f"test-set job {job_id} is {job.state}; its table exists only once done")
    return {**job.status(), "rows": await asyncio.to_thread(read_table, job.path)}


@router.delete("/jobs/{job_id}", response_model=JobStatus, responses={404: {**ERR, "description": "No such job."}})
async def cancel_job(job_id: str, request: Request) -> dict[str, Any]:
    job = _job(request, job_id)
    jobs_of(request).cancel(job_id)
    return job.status()
