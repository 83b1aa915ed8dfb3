"""Tiny random decoder-only Hugging Face models (tests/llm/llm_builders.py), each imported in float32
once per session into one models directory."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:  # built with transformers: without the extra attnscope[hf], skip these tests
    import transformers  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_*.py"]

sys.path.insert(0, str(Path(__file__).parent))

from llm_builders import LAYOUTS, build  # noqa: E402

from attnscope.hf.importer import import_model  # noqa: E402
from attnscope.testing import running_server  # noqa: E402


@pytest.fixture(scope="session")
def llm_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm")


@pytest.fixture(scope="session")
def llm_sources(llm_root: Path) -> dict[str, Path]:
    return {layout: build(layout, llm_root / "hf" / layout) for layout in LAYOUTS}


@pytest.fixture(scope="session")
def llm_models(llm_root: Path, llm_sources: dict[str, Path]) -> Path:
    """The models directory: every layout imported as ``en-de-<layout>`` (float32)."""
    models = llm_root / "models"
    for layout, source in llm_sources.items():
        import_model(str(source), models / f"en-de-{layout}", dtype="float32", pair=("en", "de"))
    return models


@pytest.fixture(scope="session")
def server(llm_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real server over the imported models."""
    with running_server(llm_models, tmp_path_factory.mktemp("llm-server") / "server.log") as url:
        yield url
