"""Shared fixtures: tiny real model folders (real SentencePiece, random weights)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from attnscope.testing import TINY_KINDS, build_tiny_models

# Property tests (hypothesis) draw the same examples on every run, so the suite never fails by
# chance; HYPOTHESIS_PROFILE=explore draws new ones (and remembers failures in .hypothesis/).
settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# One intra-op thread for the models this process runs (servers started by the tests take their
# own --torch-threads, 1 by default). Tiny models gain nothing from a second thread, and on a
# busy machine it only spins: `attnscope evaluate --ablate` of the browser tests' tiny
# Transformer took 37.5 s of CPU on two threads, 2.3 s on one. The whole suite already ran on
# one (several directories' conftest set it when collected); a directory run alone now does too.
# A test that needs more threads sets them and puts this back.
torch.set_num_threads(1)


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
