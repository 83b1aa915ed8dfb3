"""A bounded registry prices a load by its weights' bytes, then the load checks the config
against the same safetensors header: one parser, and one read of the file for both."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from attnscope.engine.residency import weights_bytes
from attnscope.repository import WEIGHTS_FILE, load_model_folder
from attnscope.testing import TINY_KINDS, build_tiny_models
from attnscope.weights_header import BadHeader


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (built,) = build_tiny_models(tmp_path, kinds=TINY_KINDS[:1])
    return built


def test_the_price_is_the_headers_tensor_bytes_read_once_for_the_load_too(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = folder / WEIGHTS_FILE
    with safe_open(str(weights), "pt") as stored:  # an independent count of the bytes
        expected = sum(stored.get_tensor(k).numel() * stored.get_tensor(k).element_size() for k in stored.keys())
    opened: list[Path] = []
    real_open = Path.open

    def counting_open(self: Path, *args: object, **kwargs: object) -> object:
        if self == weights:
            opened.append(self)
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", counting_open)
    assert weights_bytes(folder) == expected > 0
    assert load_model_folder(folder).id == folder.name
    assert len(opened) == 1  # the price's read; the load's config check reused it


def test_a_file_written_again_is_read_again(folder: Path) -> None:
    assert weights_bytes(folder) > 0
    (folder / WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(BadHeader, match="too short|header claims"):
        weights_bytes(folder)
