"""`make install` / `make serve` say what they do as they go (a first install took 4 silent
minutes behind pip's --quiet), the native build's log gives a realistic time, and the README
names the Debian packages the Makefile installs as root. Read from `make -n` (a dry run: nothing
is installed) and the files themselves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def dry_run(target: str, tmp_path: Path) -> str:
    if shutil.which("make") is None:
        pytest.fail("these checks need GNU make (apt-get install make)", pytrace=False)
    done = subprocess.run(
        ["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_install_prints_its_steps_and_pip_its_progress(tmp_path: Path) -> None:
    out = dry_run("install", tmp_path)
    pip = next(line for line in out.splitlines() if "pip install" in line)
    assert "--quiet" not in pip and " -q" not in pip  # pip's own progress lines are shown
    steps = re.findall(r"attnscope install \[(\d)/(\d)\]", out)
    assert steps == [("1", "2"), ("2", "2")]
    assert out.index("[1/2]") < out.index("pip install") < out.index("[2/2]") < out.index("attnscope.nn.native")


def test_serve_says_what_it_checks_and_installs_as_root(tmp_path: Path) -> None:
    out = dry_run("serve", tmp_path)
    assert "dataset-fashion-mnist" in out and "as root" in out
    assert out.index("ensure-fashion-mnist.sh") < out.index("attnscope serve")


def test_the_native_build_states_a_realistic_time() -> None:
    source = (REPO / "attnscope/nn/native/library.py").read_text()
    assert "15-60 s" not in source  # it took 112 s on a busy 2-core machine
    assert "1-2 minutes on 2 busy cores" in source


def test_the_readme_names_what_runs_as_root() -> None:
    readme = (REPO / "README.md").read_text()
    for package, script in (("dataset-fashion-mnist", "ensure-fashion-mnist.sh"), ("chromium", "ensure-chromium.sh")):
        assert f"`{package}`" in readme and script in readme
    assert "as root" in readme
