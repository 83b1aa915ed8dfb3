"""Where the native library lives, how it is built (at install time) and how it is loaded (at
serve time, never built there).

The library is one file, ``attnscope_native-<key>.so``, in a folder of this install (by default
``<venv>/share/attnscope/native``; ``ATTNSCOPE_NATIVE_DIR`` moves it). The key is a hash of the
C++ sources, the compiler flags, torch's version and ABI and Python's version, so two installs
(or two checkouts sharing one venv) never use a library built for other sources, and a new
torch or an edited source simply asks for a new build.

:func:`build` compiles in a child process, into a private temporary folder (torch's extension
builder and its lock file live there, never in the shared ``~/.cache/torch_extensions``), then
moves the finished file into place with one atomic rename and checks it by loading it in this
process. A build killed half-way leaves only its temporary folder (removed by the next build);
the library's own path holds a complete file or nothing. :func:`load` only loads: a missing or
broken file is a warning and the Python step."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from attnscope import config

log = logging.getLogger(__name__)
NAME = "attnscope_native"
SOURCES = [Path(__file__).with_name(name) for name in ("fp32_step.cpp", "int8_step.cpp", "beam.cpp")]
CFLAGS = ["-O3"]
STALE_BUILD_S = 3600.0  # a temporary build folder this old belongs to a build that died


class BuildError(RuntimeError):
    """The library could not be built or does not pass its check."""


def key() -> str:
    """16 hex digits naming this build: sources, flags, torch (version, C++ ABI), Python, machine."""
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    facts = [torch.__version__, str(abi), *CFLAGS, sys.implementation.cache_tag or "", platform.machine()]
    digest.update("\0".join(facts).encode())
    return digest.hexdigest()[:16]


def library_dir() -> Path:
    """The folder of this install's native libraries (``ATTNSCOPE_NATIVE_DIR`` or in the venv)."""
    configured: Path | None = config.current("native_dir")
    return configured or Path(sys.prefix) / "share" / "attnscope" / "native"


def library_path() -> Path:
    """The library these sources and this torch need: ``<library_dir>/attnscope_native-<key>.so``."""
    return library_dir() / f"{NAME}-{key()}.so"


def loaded() -> Any | None:
    """``torch.ops.attnscope_native`` if a library is loaded in this process, else None."""
    namespace = torch.ops.attnscope_native
    return namespace if hasattr(namespace, "top_candidates") else None


def load(path: Path | None = None) -> tuple[Any | None, str]:
    """Load the built library (never build it): (the operations, "") or (None, why not)."""
    if (namespace := loaded()) is not None:
        return namespace, ""
    path = path or library_path()
    if not path.is_file():
        return None, f"no native library built for these sources at {path} (run `attnscope build-native`)"
    try:
        torch.ops.load_library(str(path))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: say so, decode in Python
        return None, f"{path} could not be loaded ({' '.join(str(exc).split())[:300]})"
    if (namespace := loaded()) is None:
        return None, f"{path} does not define the attnscope_native operations"
    return namespace, ""


def check(namespace: Any) -> None:
    """Raise BuildError unless the loaded operations answer as the Python ones: greedy's choice
    on a small random matrix equals ``max``."""
    log_probs = torch.log_softmax(torch.randn(3, 11, generator=torch.Generator().manual_seed(0)), -1)
    values, words = namespace.best_words(log_probs, [])
    expected_values, expected_words = log_probs.max(-1)
    if not (torch.equal(words, expected_words) and torch.equal(values, expected_values)):
        raise BuildError("the native library loads but its best_words disagrees with torch.max")


def build(*, force: bool = False, timeout_s: float = 900.0) -> Path:
    """Build the library for these sources (unless a valid one is there and not ``force``),
    move it into place atomically, load it here and check it. Returns its path; BuildError
    when there is no compiler, the build fails or the result does not pass :func:`check`."""
    target = library_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(target.parent)
    if target.is_file() and not force:
        namespace, why = load(target)
        if namespace is not None:
            check(namespace)
            return target
        log.warning("rebuilding: %s", why)
    if loaded() is not None:
        raise BuildError("a native library is already loaded in this process; build in a fresh one")
    started = time.perf_counter()
    log.info("building the native operations into %s (a C++ compiler: 1-2 minutes on 2 busy cores, under 30 s on a fast machine) ...", target)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as scratch:
        _compile_in_child(Path(scratch), timeout_s)
        staged = Path(scratch) / target.name
        shutil.copy2(Path(scratch) / f"{NAME}.so", staged)
        os.replace(staged, target)  # one rename: the path holds a whole library or nothing
    namespace, why = load(target)
    if namespace is None:
        target.unlink(missing_ok=True)
        raise BuildError(why)
    check(namespace)
    log.info("built and checked %s in %.1f s", target, time.perf_counter() - started)
    return target


def _compile_in_child(scratch: Path, timeout_s: float) -> None:
    """torch's extension builder in a child process (it loads what it builds, and a process can
    hold one copy of the operations: this one must load the final file), its lock in ``scratch``."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # the ninja wheel
    code = (
        "import sys\nfrom torch.utils import cpp_extension\n"
        f"cpp_extension.load(name={NAME!r}, sources={[str(s) for s in SOURCES]!r}, extra_cflags={CFLAGS!r}, "
        "build_directory=sys.argv[1], is_python_module=False, verbose=False)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(scratch)], env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"the build did not finish: {exc}") from exc
    if done.returncode != 0 or not (scratch / f"{NAME}.so").is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise BuildError(f"the build failed (exit {done.returncode}):\n{tail}")


def _remove_stale_builds(folder: Path) -> None:
    """Remove temporary build folders left by builds that died (older than an hour)."""
    for scratch in folder.glob(".build-*"):
        try:
            if time.time() - scratch.stat().st_mtime > STALE_BUILD_S:
                shutil.rmtree(scratch, ignore_errors=True)
        except OSError:
            continue
