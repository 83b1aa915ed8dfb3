"""``analyze --ray``: on a local Ray (one actor, two CPUs) the Parquet equals the in-process one."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from attnscope.analysis.runner import HEADS_FILE, ROWS_FILE, AnalyzeOptions, analyze
from attnscope.cli import build_parser
from attnscope.executor import Runner, run_batches
from attnscope.extras import MissingExtra, join_ray

from .conftest import write_corpus


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingExtra, match=r"--ray needs ray .*: pip install 'attnscope\[ray\]'"):
        run_batches(Runner(Path("."), ray=""), lambda translator, batch: batch, [1])


def test_ray_flag_takes_an_optional_address() -> None:
    parse = build_parser().parse_args
    assert parse(["analyze", "m", "--corpus", "c", "--out", "o"]).ray is None
    assert parse(["analyze", "m", "--corpus", "c", "--out", "o", "--ray"]).ray == ""
    assert parse(["analyze", "m", "--corpus", "c", "--out", "o", "--ray", "ray://head:10001"]).ray == "ray://head:10001"


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One local Ray (2 CPUs) for the module's runs, started the way ``analyze --ray`` starts it."""
    pytest.importorskip("ray.data")
    import ray

    started = join_ray("", cpus=2, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize(("sentences", "teacher_forced"), [(200, True), (40, False)])
def test_ray_and_in_process_write_the_same_parquet(
    tmp_path: Path, tiny_models_dir: Path, sentences: int, teacher_forced: bool
) -> None:
    corpus = write_corpus(tmp_path / "corpus", sentences)
    shared = {
        "model": tiny_models_dir / "en-de-transformer", "corpus": corpus["corpus"], "batch_size": 16, "progress": False,
        "threads": 1,  # bit-for-bit equality needs equal thread counts (AnalyzeOptions)
        **({"references": corpus["references"], "alignments": corpus["alignments"]} if teacher_forced else {}),
    }  # fmt: skip
    local = analyze(AnalyzeOptions(out=tmp_path / "local", **shared))
    remote = analyze(AnalyzeOptions(out=tmp_path / "ray", ray="", actors=1, **shared))
    assert local["sentences"] == remote["sentences"] == sentences and remote["runner"] == "ray local"
    for name in (ROWS_FILE, HEADS_FILE):
        a, b = pq.read_table(tmp_path / "local" / name), pq.read_table(tmp_path / "ray" / name)
        assert a.num_rows > 0 and a.equals(b), name
