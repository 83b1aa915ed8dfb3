"""Tiny Hugging Face models built here (no network) and their imports, shared by tests/hf.

Each family is built once per session with odd sizes (d_model 48, 3 heads, unequal encoder and
decoder depths) and imported in float32 into one models directory, which one real server
serves for the API tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:  # tests/hf build their models with transformers: without the extra attnscope[hf], skip them
    import transformers  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_*.py"]

sys.path.insert(0, str(Path(__file__).parent))

from builders import KINDS  # noqa: E402

from attnscope.hf.importer import import_model  # noqa: E402
from attnscope.testing import running_server  # noqa: E402


@pytest.fixture(scope="session")
def hf_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {name: kind.build(root / name) for name, kind in KINDS.items()}


@pytest.fixture(scope="session")
def marian_source(hf_sources: dict[str, Path]) -> Path:
    """A Marian of odd sizes: d_model 48, 3 heads, 3 encoder and 2 decoder layers, swish."""
    return hf_sources["marian"]


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory: pytest.TempPathFactory, hf_sources: dict[str, Path]) -> Path:
    """A models directory holding every family imported in float32."""
    root = tmp_path_factory.mktemp("hf-models")
    for name, kind in KINDS.items():
        import_model(str(hf_sources[name]), root / kind.model_id, dtype="float32", pair=kind.pair)
    return root


@pytest.fixture(scope="session")
def originals(hf_sources: dict[str, Path]) -> dict[str, tuple[Any, Any]]:
    """Each original model (eager attention, float32) and its tokenizer."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    out = {}
    for name, folder in hf_sources.items():
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        pair = KINDS[name].pair
        if pair is not None:
            tokenizer.src_lang, tokenizer.tgt_lang = pair
        out[name] = (model, tokenizer)
    return out


@pytest.fixture(scope="session")
def hf_server(hf_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(hf_models, tmp_path_factory.mktemp("hf-server") / "server.log") as url:
        yield url
