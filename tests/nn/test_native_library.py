"""The native library's life cycle (attnscope/nn/native/library.py): named by its sources, built at
install time into a file that is whole or absent, only ever loaded at serve time; a missing,
broken or half-built library means the Python step and a log line saying why, never a wait.

Each case runs in a child process (a process holds one copy of the operations) with its own
``ATTNSCOPE_NATIVE_DIR``, so the install's own library is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnscope.config import REPO_ROOT
from attnscope.nn.native import library

PROBE = (
    "import logging, sys\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
    "from attnscope.nn import native\n"
    "print('OPS', native.ops() is not None)\n"
)


def _child(native_dir: Path, code: str = PROBE, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATTNSCOPE_NATIVE_DIR": str(native_dir), "ATTNSCOPE_NATIVE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
    )


def test_the_key_names_the_sources_and_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTNSCOPE_NATIVE_DIR", str(tmp_path))
    path = library.library_path()
    assert path.parent == tmp_path and path.name == f"attnscope_native-{library.key()}.so"
    assert library.key() == library.key() and len(library.key()) == 16
    edited = tmp_path / "beam.cpp"
    edited.write_text(library.SOURCES[1].read_text() + "\n// edited\n")
    monkeypatch.setattr(library, "SOURCES", [library.SOURCES[0], edited])
    assert library.library_path() != path  # other sources never load this build
    monkeypatch.delenv("ATTNSCOPE_NATIVE_DIR")
    assert library.library_dir() == Path(sys.prefix) / "share" / "attnscope" / "native"  # this install's


def test_no_build_means_the_python_step_with_a_reason_and_no_build(tmp_path: Path) -> None:
    done = _child(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "OPS False" in done.stdout
    assert "using the Python step because no native library built for these sources" in done.stdout
    assert "attnscope build-native" in done.stdout
    assert list(tmp_path.iterdir()) == []  # loading never builds


def test_a_broken_library_or_a_stale_lock_means_the_python_step(tmp_path: Path) -> None:
    env_dir = tmp_path / "native"
    env_dir.mkdir()
    target = env_dir / library.library_path().name  # the key does not depend on the folder
    target.write_bytes(b"\x7fELF half a library")  # a foreign or truncated file
    (env_dir / "lock").touch()  # locks of dead builds, ours and torch's, mean nothing here
    (env_dir / ".build-dead").mkdir()
    (env_dir / ".build-dead" / "lock").touch()
    done = _child(env_dir)
    assert done.returncode == 0, done.stderr
    assert "OPS False" in done.stdout
    assert "using the Python step because" in done.stdout and "could not be loaded" in done.stdout


def test_a_build_killed_half_way_leaves_nothing_and_the_next_build_works(tmp_path: Path) -> None:
    """``make install`` interrupted during the compile: no library file (never half of one), and
    the next build (its dead temporary folder and lock beside it) builds, checks and loads."""
    env = {**os.environ, "ATTNSCOPE_NATIVE_DIR": str(tmp_path)}
    build = subprocess.Popen(
        [sys.executable, "-m", "attnscope.nn.native"], cwd=REPO_ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any((d / "build.ninja").exists() for d in tmp_path.glob(".build-*")):
            assert build.poll() is None and time.monotonic() < deadline, "the build never started compiling"
            time.sleep(0.1)
        time.sleep(1.0)  # the compiler is running
    finally:
        os.killpg(build.pid, signal.SIGKILL)  # the build and its compiler
        build.wait()
    name = f"attnscope_native-{library.key()}.so"
    assert not (tmp_path / name).exists()
    assert "OPS False" in _child(tmp_path).stdout

    done = subprocess.run(
        [sys.executable, "-m", "attnscope.nn.native"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / name).is_file()
    loaded = _child(tmp_path)
    assert "OPS True" in loaded.stdout and "using the Python step" not in loaded.stdout


def test_no_compiler_at_install_time_is_a_warning_and_no_library(tmp_path: Path) -> None:
    env = {**os.environ, "ATTNSCOPE_NATIVE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-compiler")}
    done = subprocess.run(
        [sys.executable, "-m", "attnscope.nn.native"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert "could not be built; attnscope will serve with the Python step" in done.stderr
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob(".build-*"))  # nothing half-made left
    assert "OPS False" in _child(tmp_path).stdout
