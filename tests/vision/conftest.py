"""Fixtures for the vision tests: synthetic Fashion-MNIST files (the real data set is never needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from attnscope.vision.testing import write_tiny_fashion_mnist


@pytest.fixture(scope="session")
def fashion_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_fashion_mnist(tmp_path_factory.mktemp("fashion-mnist"))


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """These tiny models run many small ops: on a busy 2-core machine a second intra-op thread
    only adds spinning (measured 20× slower steps), so the vision tests use one, then restore."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
