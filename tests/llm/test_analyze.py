"""Head analysis of a decoder-only model (``attnscope analyze``, ``POST /api/analyze``,
``attnscope.load(folder).analyze``): its statistics recomputed here with numpy from the full causal
matrix ``/api/llm/align`` returns (slice by the source span, renormalise, entropy ...), alignment
F1 equal to ``evaluate --alignment``'s for the same pairs, and the three doors giving one answer."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_served import post

import attnscope
from attnscope.alignment.corpus import AlignedPair
from attnscope.alignment.words import word_spans
from attnscope.cli import main
from attnscope.llm.alignment import score_llm_heads
from attnscope.llm.folder import load_llm_folder
from attnscope.llm.translator import LLMTranslator

MODEL = "en-de-qwen2"
SOURCES = ["Two dogs play in the snow .", "A man reads a book ."]
TARGETS = ["Zwei Hunde spielen im Schnee .", "Ein Mann liest ein Buch ."]
LINKS = ["0-0 1-1 2-2 3-3 4-3 5-4 6-5", "0-0 1-1 2-2 3-3 4-4 5-5"]


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture(scope="module")
def analysed(server: str) -> dict[str, Any]:
    status, answer = post(f"{server}/api/analyze", {"model": MODEL, "sentences": SOURCES, "references": TARGETS,
                                                     "alignments": LINKS})  # fmt: skip
    assert status == 200, answer
    return answer


def _row(answer: dict[str, Any], sentence: int, kind: str, layer: int, head: int) -> dict[str, Any]:
    rows = answer["rows"]
    for k in range(len(rows["sentence"])):
        if (rows["sentence"][k], rows["kind"][k], rows["layer"][k], rows["head"][k]) == (sentence, kind, layer, head):
            return {name: values[k] for name, values in rows.items()}
    raise AssertionError(f"no row {sentence} {kind} {layer}.{head}")


def test_statistics_are_those_of_the_renormalised_slices_of_the_full_matrix(server: str, analysed: dict[str, Any]) -> None:
    status, a = post(f"{server}/api/llm/align", {"model": MODEL, "text": SOURCES[1], "target": TARGETS[1], "views": ["full"]})
    assert status == 200, a
    full = np.asarray(a["attention"]["full"], dtype=np.float64)  # (L, H, n, n)
    s0, s1 = a["source_span"]
    first, n = a["first_target_row"], full.shape[-1]
    slices = {"cross": (slice(first, n), slice(s0, s1)), "encoder_self": (slice(s0, s1), slice(s0, s1)),
              "decoder_self": (slice(first, n), slice(first, n))}  # fmt: skip
    layers, heads = full.shape[:2]
    checked = skipped_rows = 0
    for kind, (rows, keys) in slices.items():
        for layer in range(layers):
            for head in range(heads):
                raw = full[layer, head, rows, keys]
                got = _row(analysed, 1, kind, layer, head)
                assert (got["queries"], got["keys"]) == raw.shape
                assert got["outside_share"] == pytest.approx(float((1 - raw.sum(-1)).mean()), abs=2e-5)
                assert got["sink_share"] == pytest.approx(float(full[layer, head, rows, 0].mean()), abs=2e-5)
                seen = raw.sum(-1) > 0  # a sliding-window row may see none of the view's keys
                with np.errstate(invalid="ignore"):
                    p = np.where(seen[:, None], raw / raw.sum(-1, keepdims=True), np.nan)
                if not seen.any():
                    assert got["entropy"] is None and got["max_weight"] is None
                    skipped_rows += 1
                    continue
                entropy = float(np.nanmean(-(p * np.log(np.clip(p, 1e-30, None))).sum(-1)))
                assert got["entropy"] == pytest.approx(entropy, abs=2e-4)
                assert got["max_weight"] == pytest.approx(float(np.nanmean(p.max(-1))), abs=2e-5)
                if kind == "decoder_self":
                    assert got["eos_share"] == pytest.approx(float(np.nanmean(p[:, 0])), abs=2e-5)
                    assert got["rare_share"] is None
                else:
                    assert got["eos_share"] is None
                if kind != "cross":
                    assert got["same_share"] == pytest.approx(float(np.nanmean(np.diagonal(p))), abs=2e-5)
                    if p.shape[0] > 1:
                        assert got["prev_share"] == pytest.approx(float(np.nanmean(np.diagonal(p, -1))), abs=2e-5)
                else:
                    assert got["same_share"] is None
                checked += 1
    assert checked + skipped_rows == 3 * layers * heads and checked > skipped_rows


def test_alignment_f1_is_that_of_evaluate_alignment(llm_models: Path, analysed: dict[str, Any]) -> None:
    translator = LLMTranslator(load_llm_folder(llm_models / MODEL))
    refs = [AlignedPair({tuple(map(int, link.split("-"))) for link in links.split()}, word_spans(s, "en"), word_spans(t, "de"))
            for s, t, links in zip(SOURCES, TARGETS, LINKS, strict=True)]  # fmt: skip
    report = score_llm_heads(translator, list(zip(SOURCES, TARGETS, strict=True)), refs)
    cross = {(h["layer"], h["head"]): h["alignment_f1"] for h in analysed["heads"] if h["kind"] == "cross"}
    assert len(cross) == len(report["f1"]) * len(report["f1"][0])
    for layer, row in enumerate(report["f1"]):
        for head, f1 in enumerate(row):
            assert cross[(layer, head)] == pytest.approx(f1, abs=1e-4)
    assert {h["kind"] for h in analysed["heads"]} == {"cross", "encoder_self", "decoder_self"}
    assert all(h["role"] for h in analysed["heads"])


def test_the_command_and_the_python_api_give_the_server_s_answer(llm_models: Path, tmp_path: Path, server: str,
                                                                  analysed: dict[str, Any]) -> None:  # fmt: skip
    files = {}
    for name, lines in (("src", SOURCES), ("ref", TARGETS), ("links", LINKS)):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["analyze", str(llm_models / MODEL), "--corpus", str(files["src"]), "--references", str(files["ref"]),
                 "--alignments", str(files["links"]), "--out", str(out), "--quiet"]) == 0  # fmt: skip
    heads = pq.read_table(out / "heads.parquet").to_pylist()
    served = {(h["kind"], h["layer"], h["head"]): h for h in analysed["heads"]}
    assert len(heads) == len(served)
    for h in heads:
        other = served[(h["kind"], h["layer"], h["head"])]
        assert h["role"] == other["role"]
        for name in ("entropy_mean", "outside_share_mean", "sink_share_mean", "alignment_f1"):
            assert (h[name] is None) == (other[name] is None)
            if h[name] is not None:
                assert h[name] == pytest.approx(other[name], abs=1e-5)
    # shipped in the folder, the summary is served and the Models page knows it is there
    shipped = llm_models / MODEL / "analysis" / "heads.json"
    assert get(f"{server}/api/models/{MODEL}/analysis")[0] == 404
    shipped.parent.mkdir()
    shutil.copy(out / "heads.json", shipped)
    try:
        status, summary = get(f"{server}/api/models/{MODEL}/analysis")
        assert status == 200, summary
        assert {(h["kind"], h["layer"], h["head"]): h["role"] for h in summary["heads"]} == {
            k: h["role"] for k, h in served.items()}
    finally:
        shutil.rmtree(shipped.parent)
    local = attnscope.load(llm_models / MODEL).analyze(SOURCES, TARGETS, LINKS, rows=False)
    mine = {(h["kind"], h["layer"], h["head"]): h for h in local.heads}
    assert mine.keys() == served.keys()
    assert all(mine[k]["role"] == served[k]["role"] for k in mine)


def test_greedy_analysis_and_bad_requests(server: str) -> None:
    status, a = post(f"{server}/api/analyze", {"model": MODEL, "sentences": ["A dog runs ."], "rows": False})
    assert status == 200, a
    assert a["mode"] == "greedy" and a["sentences"] == 1 and a["skipped"] == [] and a["rows"] is None
    assert {h["kind"] for h in a["heads"]} == {"cross", "encoder_self", "decoder_self"}
    assert all(h["alignment_f1"] is None for h in a["heads"])
    status, bad = post(f"{server}/api/analyze", {"model": MODEL, "sentences": SOURCES, "alignments": LINKS})
    assert status == 422 and "needs references" in json.dumps(bad)
    status, bad = post(f"{server}/api/analyze", {"model": MODEL, "sentences": SOURCES, "references": TARGETS[:1]})
    assert status == 422 and "references" in json.dumps(bad)
    status, bad = post(f"{server}/api/analyze", {"model": MODEL, "sentences": SOURCES, "references": TARGETS,
                                                  "alignments": ["0-9", "0-0"]})  # fmt: skip
    assert status == 422 and "alignments" in json.dumps(bad)
    long = " ".join(["Hunde"] * 150)  # over analyze's 200 tokens: skipped and named, as for an encoder-decoder
    status, a = post(f"{server}/api/analyze", {"model": MODEL, "sentences": SOURCES, "references": [TARGETS[0], long],
                                                "rows": False})  # fmt: skip
    assert status == 200 and a["skipped"] == [1] and a["sentences"] == 1, a
