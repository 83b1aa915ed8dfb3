"""Tiny Hugging Face models built here (no network) and their imports, shared by tests/hf."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="tests/hf need the extra attnscope[hf]")

sys.path.insert(0, str(Path(__file__).parent))

from builders import marian_folder  # noqa: E402

from app.hf.importer import import_model  # noqa: E402
from app.testing import running_server  # noqa: E402


@pytest.fixture(scope="session")
def marian_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Marian of odd sizes: d_model 48, 3 heads, 3 encoder and 2 decoder layers, swish."""
    return marian_folder(tmp_path_factory.mktemp("hf") / "marian")


@pytest.fixture(scope="session")
def marian_models(tmp_path_factory: pytest.TempPathFactory, marian_source: Path) -> Path:
    """A models directory holding the Marian imported in float32."""
    root = tmp_path_factory.mktemp("hf-models")
    import_model(str(marian_source), root / "en-de-marian", dtype="float32")
    return root


@pytest.fixture(scope="session")
def marian_original(marian_source: Path) -> tuple[Any, Any]:
    """The original model (eager attention, float32) and its tokenizer."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(marian_source, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(marian_source)


@pytest.fixture(scope="session")
def marian_server(marian_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(marian_models, tmp_path_factory.mktemp("hf-server") / "server.log") as url:
        yield url
