"""Issue 45.4: an ``analyze`` re-run killed half-way leaves the previous run's folder whole
(never a new rows.parquet beside the old run's other files), and never replaces a folder of
other files."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnscope.analysis import runner
from attnscope.analysis.runner import META_FILE, ROWS_FILE, AnalyzeOptions, analyze
from attnscope.staging import COMPLETE_FILE, read_marker


class Interrupted(Exception):
    pass


def _options(model: Path, corpus: dict[str, Path], out: Path, limit: int) -> AnalyzeOptions:
    return AnalyzeOptions(model=model, corpus=corpus["corpus"], out=out, progress=False, limit=limit)


def test_a_rerun_interrupted_after_its_rows_keeps_the_first_run(
    tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, out = tiny_models_dir / "en-de-transformer", tmp_path / "out"
    analyze(_options(model, analysis_corpus, out, limit=5))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert read_marker(out, "analysis")["files"].keys() == before.keys() - {COMPLETE_FILE}

    def die(*_: object) -> int:  # rows.parquet and heads.parquet are written; then the kill
        raise Interrupted

    monkeypatch.setattr(runner, "write_summary", die)
    with pytest.raises(Interrupted):
        analyze(_options(model, analysis_corpus, out, limit=8))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


def test_analyze_refuses_an_out_folder_of_other_files_before_running(
    tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path]
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("mine")
    with pytest.raises(ValueError, match="is not an analysis folder that attnscope wrote"):
        analyze(_options(tiny_models_dir / "en-de-transformer", analysis_corpus, tmp_path / "out", limit=2))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["thesis.tex"]
    assert not (tmp_path / "out" / META_FILE).exists() and not (tmp_path / "out" / ROWS_FILE).exists()
