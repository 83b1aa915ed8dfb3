"""``model.analyze(sentences)`` gives the numbers of ``attnscope analyze`` on the same lines (its
heads.parquet and rows.parquet, read back with pyarrow), in process and through the client over a
real server (``POST /api/analyze``), with the REST errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

import attnscope
from attnscope.analysis.runner import HEADS_FILE, ROWS_FILE, AnalyzeOptions, analyze
from attnscope.api.local import LocalModel
from tests.analysis.conftest import write_corpus

MODEL = "en-de-transformer"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_corpus(tmp_path_factory.mktemp("api-analyze"), 36)  # two batches of the command's 32


@pytest.fixture(scope="module")
def command(tiny_models_dir: Path, corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``attnscope analyze`` over the corpus, teacher-forced with links, one torch thread."""
    out = tmp_path_factory.mktemp("api-analyze-out") / "out"
    analyze(AnalyzeOptions(model=tiny_models_dir / MODEL, corpus=corpus["corpus"], out=out, references=corpus["references"],
                           alignments=corpus["alignments"], threads=1, progress=False))  # fmt: skip
    return out


def test_analyze_gives_the_command_numbers(local_models: dict[str, LocalModel], corpus: dict[str, Path], command: Path) -> None:
    result = local_models[MODEL].analyze(corpus["corpus"], corpus["references"], corpus["alignments"])
    assert result["mode"] == "teacher-forced" and result["sentences"] == 36 and result["skipped"] == []
    assert result.heads == pq.read_table(command / HEADS_FILE).to_pylist()
    rows = pq.read_table(command / ROWS_FILE).to_pydict()
    assert result["rows"] == rows
    frame = result.rows()
    assert len(frame) == len(rows["sentence"]) and frame["sentence"].max() == 35
    # the numpy view: [layers, heads] of one statistic, as the head summaries hold it
    layers, heads = local_models[MODEL].info["layers"], local_models[MODEL].info["heads"]
    grid = result.grid("alignment_f1", "cross")
    assert grid.shape == (layers, heads) and not np.isnan(grid).any()
    first = next(h for h in result.heads if h["kind"] == "cross" and h["layer"] == 0 and h["head"] == 1)
    assert grid[0, 1] == first["alignment_f1"] and result.roles[("cross", 0, 1)] == first["role"]
    assert list(result.to_pandas()["role"]) == [h["role"] for h in result.heads]


def test_client_and_rest_give_the_same_analysis(
    local_models: dict[str, LocalModel], api_server: str, http: httpx.Client, corpus: dict[str, Path]
) -> None:
    sentences = corpus["references"].read_text(encoding="utf-8").splitlines()[:5]  # German lines as sources: any text
    local = local_models["en-de-rnn-additive"].analyze(sentences, rows=False)
    remote = attnscope.Client(api_server).load("en-de-rnn-additive").analyze(sentences, rows=False)
    rest = http.post("/api/analyze", json={"model": "en-de-rnn-additive", "sentences": sentences, "rows": False})
    assert rest.status_code == 200, rest.text
    assert local.to_dict() == remote.to_dict() == rest.json()
    assert local["mode"] == "greedy" and local["rows"] is None and local.kinds == ["cross"]
    with pytest.raises(KeyError, match="no rows"):
        local.rows()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sentences": ["A dog.", "A cat."], "references": ["Ein Hund."]}, "references: has 1 lines but sentences has 2"),
        ({"sentences": ["A dog."], "alignments": ["0-0"]}, "alignments: needs references"),
        ({"sentences": ["A dog."], "references": ["Ein Hund."], "alignments": ["0-7"]}, "alignments: alignments:1: a link points past"),
        ({"sentences": []}, "sentences: List should have at least 1 item"),
        ({"sentences": ["A dog.", "   "]}, "sentences[1]: must not be empty"),
        ({"sentences": ["A dog.", "a " * 600]}, "sentences[1]: has 1200 characters; the limit is"),
    ],
)
def test_bad_corpus_is_the_same_422(
    local_models: dict[str, LocalModel], api_server: str, http: httpx.Client, fields: dict[str, Any], message: str
) -> None:
    rest = http.post("/api/analyze", json={"model": MODEL, **fields})
    assert rest.status_code == 422 and rest.json()["detail"].startswith(message), rest.text
    with pytest.raises(attnscope.InvalidRequest) as local:
        local_models[MODEL].analyze(**fields)
    with pytest.raises(attnscope.InvalidRequest) as remote:
        attnscope.Client(api_server).load(MODEL).analyze(**fields)
    assert str(local.value) == str(remote.value) == rest.json()["detail"]


def test_one_string_is_refused(local_models: dict[str, LocalModel]) -> None:
    with pytest.raises(TypeError, match="a list of sentences, or a pathlib.Path"):
        local_models[MODEL].analyze("A dog runs.")
