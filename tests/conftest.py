"""Shared fixtures: tiny real model folders (real SentencePiece, random weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.testing import build_tiny_models


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding en-de-{transformer, rnn-additive, rnn-none, self-attentive}."""
    root = tmp_path_factory.mktemp("models")
    build_tiny_models(root)
    return root
