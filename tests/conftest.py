"""Shared fixtures: tiny real model folders (real SentencePiece, random weights)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from attnscope.testing import TINY_KINDS, build_tiny_models

# Property tests (hypothesis) draw the same examples on every run, so the suite never fails by
# chance; HYPOTHESIS_PROFILE=explore draws new ones (and remembers failures in .hypothesis/).
settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding en-de-{transformer, rnn-additive, rnn-none, self-attentive}."""
    root = tmp_path_factory.mktemp("models")
    build_tiny_models(root)
    return root


@pytest.fixture(scope="session")
def byte_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """en-de-transformer and en-de-rnn-additive with a byte-fallback tokenizer (no <unk>)."""
    root = tmp_path_factory.mktemp("byte-models")
    build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")], byte_fallback=True)
    return root
