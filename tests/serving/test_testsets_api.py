"""``/api/testsets/jobs`` on a tiny model: per-sentence BLEU and chrF equal sacreBLEU on the same
outputs, progress reaches the total, the table is Parquet renamed into place, a cancelled job
leaves no file, bad requests are 4xx with a message."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sacrebleu
from fastapi.testclient import TestClient

from attnscope.engine.testset_data import TestSet
from attnscope.engine.testsets import TestSetJobs
from attnscope.testing import TINY_PAIRS
from attnscope.translator import Translator


@pytest.fixture(scope="module")
def client(
    tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory, client_for: Any
) -> Iterator[TestClient]:
    """A server whose results folder is this module's (not the shared temporary one)."""
    with client_for(
        tiny_models_dir, testsets_dir=tmp_path_factory.mktemp("testsets")
    ) as test_client:
        yield test_client


def wait_for(client: TestClient, job_id: str, states: set[str]) -> dict[str, Any]:
    for _ in range(600):  # a bound on polls, not a timing assertion
        status = client.get(f"/api/testsets/jobs/{job_id}").json()
        if status["state"] in states:
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never reached {states}: {status}")


def test_a_job_scores_each_sentence_as_sacrebleu_does(client: TestClient) -> None:
    sources = [s for s, _ in TINY_PAIRS]
    references = [t for _, t in TINY_PAIRS]
    r = client.post(
        "/api/testsets/jobs",
        json={"model": "en-de-transformer", "sources": sources, "references": references},
    )
    assert r.status_code == 202, r.text
    job = wait_for(client, r.json()["id"], {"done", "failed"})
    assert job["state"] == "done" and job["done"] == job["total"] == len(sources)
    rows = client.get(f"/api/testsets/jobs/{job['id']}/rows").json()["rows"]
    assert [row["index"] for row in rows] == list(range(len(sources)))
    for row, ref in zip(rows, references, strict=True):
        assert row["reference"] == ref
        assert row["bleu"] == round(sacrebleu.sentence_bleu(row["output"], [ref]).score, 2)
        assert row["chrf"] == round(sacrebleu.sentence_chrf(row["output"], [ref]).score, 2)
        assert row["source_words"] == len(row["source"].split())
        assert row["mean_logprob"] < 0 and 0 < row["coverage"] <= 1 and 0 <= row["entropy"] <= 1
    jobs = client.app.state.testset_jobs  # type: ignore[attr-defined]
    folder = jobs.get(job["id"]).path
    assert (
        pq.read_table(folder / "rows.parquet").num_rows == len(sources)
        and (folder / "complete.json").is_file()
    )


def test_bad_requests_are_4xx_with_a_message(client: TestClient) -> None:
    cases = [
        ({"model": "en-de-transformer"}, 400, "either split"),
        (
            {"model": "en-de-transformer", "sources": ["a b"], "alignments": ["0-0"]},
            400,
            "alignments need references",
        ),
        (
            {
                "model": "en-de-transformer",
                "sources": ["a b"],
                "references": ["x"],
                "alignments": ["0-1"],
            },
            400,
            "points past",
        ),
        (
            {
                "model": "en-de-transformer",
                "sources": ["a b"],
                "references": ["x"],
                "alignments": ["0:0"],
            },
            400,
            "not an alignment link",
        ),
        (
            {"model": "en-de-transformer", "sources": ["a"], "references": ["x", "y"]},
            400,
            "1 sources but 2 references",
        ),
        ({"model": "en-de-transformer", "sources": []}, 400, "no sentences"),
        ({"model": "en-de-transformer", "split": "dev"}, 400, "unknown split 'dev'"),
    ]
    for body, status, words in cases:
        r = client.post("/api/testsets/jobs", json=body)
        assert r.status_code == status and words in r.text, (body, r.text)
    assert client.get("/api/testsets/jobs/nope").status_code == 404
    assert (
        client.post("/api/testsets/jobs", json={"model": "nope", "sources": ["a"]}).status_code
        == 404
    )


class GatedTranslator:
    """A real translator whose second batch waits until the test has cancelled the job."""

    def __init__(
        self, real: Translator, cancelled: threading.Event, first_done: threading.Event
    ) -> None:
        self.real, self.loaded, self.calls = real, real.loaded, 0
        self.cancelled, self.first_done = cancelled, first_done

    def translate(self, texts: list[str], **kw: Any) -> Any:
        self.calls += 1
        if self.calls == 2:
            self.first_done.set()
            assert self.cancelled.wait(30)
        return self.real.translate(texts, **kw)


def test_a_cancelled_job_leaves_no_file(client: TestClient, tmp_path: Path) -> None:
    real = client.app.state.service.get("en-de-transformer").translator  # type: ignore[attr-defined]
    cancelled, first_done = threading.Event(), threading.Event()
    jobs = TestSetJobs(tmp_path, batch_size=2)
    sources = [s for s, _ in TINY_PAIRS]
    job = jobs.start(GatedTranslator(real, cancelled, first_done), TestSet("upload", sources))  # type: ignore[arg-type]
    assert first_done.wait(30)
    jobs.cancel(job.id)
    assert job.state == "cancelling"
    cancelled.set()
    for _ in range(600):
        if job.state != "cancelling":
            break
        time.sleep(0.05)
    assert job.state == "cancelled" and job.path is None
    assert list(tmp_path.iterdir()) == []  # neither a table nor a .part a reload could trust
