"""Fixtures for the Python API: the tiny models loaded in this process, and the same models
behind a real ``attnscope serve`` over HTTP, so each answer can be compared with the server's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

import attnscope
from attnscope.api.local import LocalModel
from attnscope.testing import TINY_KINDS, running_server

FAMILIES = [f"en-de-{suffix}" for suffix, _, _ in TINY_KINDS]


@pytest.fixture(scope="session")
def local_models(tiny_models_dir: Path) -> Iterator[dict[str, LocalModel]]:
    """Every tiny model (one per family), loaded in this process on the CPU, with one torch
    thread as the server runs (a sum split over threads may round its last bit differently)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    models = {name: attnscope.load(tiny_models_dir / name, device="cpu") for name in FAMILIES}
    yield models
    for model in models.values():
        model.close()
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def api_server(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`attnscope serve` over the same folders, in its own process; its base URL."""
    with running_server(tiny_models_dir, tmp_path_factory.mktemp("pyapi-server") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def http(api_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server, timeout=60) as session:
        yield session
