"""``GET /api/models/{id}/analysis``: the summary ``attnscope analyze`` writes (``heads.json``),
read from the model folder's ``analysis/`` or the ``analysis_dir`` setting; 404 with a readable
message for a model without one, an unknown model or a broken file."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from attnscope.analysis.roles import ROLES
from attnscope.analysis.runner import HEADS_FILE, AnalyzeOptions, analyze
from attnscope.analysis.summary import SUMMARY_FILE, NoAnalysis, read_summary
from attnscope.config import Settings
from attnscope.serving.main import create_app
from attnscope.testing import running_server

from .conftest import write_corpus

MODEL = "en-de-transformer"


@pytest.fixture(scope="module")
def analysed_dir(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny models, the Transformer with its analysis in ``analysis/`` (what shipping does)."""
    root = tmp_path_factory.mktemp("analysed") / "models"
    shutil.copytree(tiny_models_dir, root)
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"), 30)
    analyze(AnalyzeOptions(
        model=root / MODEL, corpus=corpus["corpus"], references=corpus["references"], alignments=corpus["alignments"],
        out=root / MODEL / "analysis", progress=False, threads=1,
    ))  # fmt: skip
    return root


@pytest.fixture(scope="module")
def server(analysed_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(analysed_dir, tmp_path_factory.mktemp("server") / "server.log") as url:
        yield url


def client(settings: Settings) -> TestClient:
    test_client = TestClient(create_app(settings), raise_server_exceptions=False, base_url="http://localhost")
    return test_client


def wait_ready(c: TestClient) -> None:
    deadline = time.monotonic() + 60
    while c.get("/api/ready").status_code != 200:
        assert time.monotonic() < deadline, "the models did not load in 60 s"
        time.sleep(0.02)


def test_the_server_serves_the_heads_analyze_wrote(server: str, analysed_dir: Path) -> None:
    r = httpx.get(f"{server}/api/models/{MODEL}/analysis", timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == MODEL and body["mode"] == "teacher-forced" and body["sentences"] == 30
    assert body["corpus"] == "src.en.gz" and body["rules"]["sink"] == 0.5
    table = pq.read_table(analysed_dir / MODEL / "analysis" / HEADS_FILE).to_pylist()
    heads = body["heads"]
    assert len(heads) == len(table) == 3 * 2 * 2  # kinds x layers x heads of the tiny Transformer
    for served, written in zip(heads, table, strict=True):
        assert (served["kind"], served["layer"], served["head"], served["role"]) == (
            written["kind"], written["layer"], written["head"], written["role"])
        assert served["role"] in ROLES
        assert served["entropy_mean"] == pytest.approx(written["entropy_mean"], abs=1e-4)
    assert all("alignment_f1" not in h and "entropy_q50" not in h for h in heads if h["kind"] != "cross")
    assert all(0.0 <= h["alignment_f1"] <= 1.0 for h in heads if h["kind"] == "cross")


def test_a_model_without_analysis_and_an_unknown_model_are_404s(server: str) -> None:
    r = httpx.get(f"{server}/api/models/en-de-rnn-additive/analysis", timeout=30)
    assert r.status_code == 404
    assert "'en-de-rnn-additive' has no head analysis" in r.json()["detail"] and "attnscope analyze" in r.json()["detail"]
    r = httpx.get(f"{server}/api/models/nope/analysis", timeout=30)
    assert r.status_code == 404 and "unknown model 'nope'" in r.json()["detail"] and MODEL in r.json()["available"]


def test_the_summary_is_small(analysed_dir: Path) -> None:
    path = analysed_dir / MODEL / "analysis" / SUMMARY_FILE
    assert path.stat().st_size < 6_000  # 12 heads; a shipped 3+3-layer, 8-head model's is ~ 6x that
    assert len(read_summary(path)["heads"]) == 12


def test_the_analysis_dir_setting_and_a_broken_file(analysed_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "analyses"
    (elsewhere / MODEL).mkdir(parents=True)
    document = json.loads((analysed_dir / MODEL / "analysis" / SUMMARY_FILE).read_text())
    document["corpus"] = "elsewhere.en"
    (elsewhere / MODEL / SUMMARY_FILE).write_text(json.dumps(document))
    (elsewhere / "en-de-rnn-additive").mkdir()
    (elsewhere / "en-de-rnn-additive" / SUMMARY_FILE).write_text('{"heads": [{"kind": "cross"}]}')
    with client(Settings(models_dir=analysed_dir, device="cpu", analysis_dir=elsewhere)) as c:
        wait_ready(c)
        r = c.get(f"/api/models/{MODEL}/analysis")
        assert r.status_code == 200 and r.json()["corpus"] == "elsewhere.en"  # the setting's file, not the folder's
        r = c.get("/api/models/en-de-rnn-additive/analysis")
        assert r.status_code == 404 and "has no list of heads with kind, layer, head, role" in r.json()["detail"]
    with pytest.raises(NoAnalysis, match="not readable JSON"):
        (tmp_path / "bad.json").write_text("{")
        read_summary(tmp_path / "bad.json")


def test_a_heads_json_of_another_shape_is_refused(analysed_dir: Path, tmp_path: Path) -> None:
    """Issue 45.4: a heads.json copied from another model (the Transformer's 12 heads beside a
    1 × 1 RNN, or one head short) is a 404 naming the mismatch, never served as this model's."""
    elsewhere = tmp_path / "analyses"
    document = json.loads((analysed_dir / MODEL / "analysis" / SUMMARY_FILE).read_text())
    for model, heads in (("en-de-rnn-additive", document["heads"]), (MODEL, document["heads"][:-1])):
        (elsewhere / model).mkdir(parents=True)
        (elsewhere / model / SUMMARY_FILE).write_text(json.dumps({**document, "heads": heads}))
    with client(Settings(models_dir=analysed_dir, device="cpu", analysis_dir=elsewhere)) as c:
        wait_ready(c)
        r = c.get("/api/models/en-de-rnn-additive/analysis")
        assert r.status_code == 404
        assert "does not fit this model: it describes 12 head(s), the model has 1 (cross 1×1)" in r.json()["detail"]
        r = c.get(f"/api/models/{MODEL}/analysis")
        assert r.status_code == 404 and "describes 11 head(s), the model has 12" in r.json()["detail"]
