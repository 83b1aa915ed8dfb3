"""``attnscope serve --models-dir DIR`` adds DIR's models to the repository's (the shipped ones
by default), ``--only-models-dir`` serves DIR alone, and an id in both is a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from attnscope.testing import build_tiny_models, server_process

TRANSFORMER = [("transformer", "transformer", None)]


def _ids(url: str) -> list[str]:
    with urllib.request.urlopen(url + "/api/models", timeout=60) as response:
        return sorted(m["id"] for m in json.loads(response.read())["models"])


def test_models_dir_adds_to_the_repository(tmp_path: Path) -> None:
    """The repository (here a tiny stand-in for the shipped models, as ATTNSCOPE_MODELS_DIR)
    and the added folder are served together; with --only-models-dir the added one alone."""
    build_tiny_models(tmp_path / "shipped", ("en", "de"), kinds=TRANSFORMER)
    build_tiny_models(tmp_path / "mine", ("en", "fr"), kinds=TRANSFORMER)
    mine = str(tmp_path / "mine")
    with server_process(tmp_path / "shipped", tmp_path / "both.log", args=("--models-dir", mine)) as (url, _):
        assert _ids(url) == ["en-de-transformer", "en-fr-transformer"]
    only = ("--models-dir", mine, "--only-models-dir")
    with server_process(tmp_path / "shipped", tmp_path / "only.log", args=only) as (url, _):
        assert _ids(url) == ["en-fr-transformer"]


def test_an_id_in_both_is_a_one_line_error(tmp_path: Path) -> None:
    build_tiny_models(tmp_path / "shipped", kinds=TRANSFORMER)
    build_tiny_models(tmp_path / "mine", kinds=TRANSFORMER)  # en-de-transformer again
    command = [sys.executable, "-m", "attnscope.cli", "serve", "--models-dir", str(tmp_path / "mine"), "--device", "cpu"]
    env = {"ATTNSCOPE_MODELS_DIR": str(tmp_path / "shipped"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode != 0
    assert "model id 'en-de-transformer' is in both" in done.stderr and "--only-models-dir" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_app_built_without_serve_keeps_its_main_repository_on_a_clash(tmp_path: Path) -> None:
    """ATTNSCOPE_ADDED_MODELS_DIR set by hand (no `serve` to refuse it): the registry logs the
    clash and serves the main repository, never two models under one id."""
    import torch

    from attnscope.engine.registry import ModelRegistry

    (main,) = build_tiny_models(tmp_path / "shipped", kinds=TRANSFORMER)
    build_tiny_models(tmp_path / "mine", kinds=TRANSFORMER)
    registry = ModelRegistry(tmp_path / "shipped", torch.device("cpu"), 100, added_dir=tmp_path / "mine")
    registry.load_all()
    assert registry.ready and registry.folders == {main.name: main}
