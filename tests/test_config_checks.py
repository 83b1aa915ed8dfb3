"""Issue 45.5: hostile model folders are refused before any allocation, with the file named.

A config's sizes are checked against model.safetensors's own header (the network built on the
meta device, a few KB of the file read) before the real network is built: ``hidden_dim: 6000``
beside a 16-wide model's weights never reaches ``build_model``. Field types are checked from the
config classes' annotations: ``-5`` and ``"256"`` are named, with config.json."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from attnscope import repository
from attnscope.repository import CONFIG_FILE, WEIGHTS_FILE, ModelFolderError, load_model_folder
from attnscope.testing import TINY_KINDS, build_tiny_models

RNN = [k for k in TINY_KINDS if k[0] == "rnn-additive"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (built,) = build_tiny_models(tmp_path, kinds=RNN)
    return built


def _edit(folder: Path, **changes: object) -> None:
    meta = json.loads((folder / CONFIG_FILE).read_text())
    meta["model"].update(changes)
    (folder / CONFIG_FILE).write_text(json.dumps(meta))


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every real (non-meta) network build load_model_folder makes."""
    made: list[object] = []
    real = repository.build_model

    def spy(config: object) -> object:
        if torch.get_default_device().type != "meta":  # the header check's shapes-only build is free
            made.append(config)
        return real(config)  # type: ignore[arg-type]

    monkeypatch.setattr(repository, "build_model", spy)
    return made


@pytest.mark.parametrize("hidden_dim", [6000, 10**9])
def test_a_size_the_weights_do_not_have_fails_before_allocating(folder: Path, builds: list[object], hidden_dim: int) -> None:
    _edit(folder, hidden_dim=hidden_dim)  # 10**9: terabytes, were it allocated
    with pytest.raises(ModelFolderError) as caught:
        load_model_folder(folder)
    message = str(caught.value)
    if hidden_dim == 6000:
        assert caught.value.file == WEIGHTS_FILE
        assert "weights do not match config.json" in message and "checked before loading" in message
        assert "config.json implies [18000, 16], the weights hold [48, 16]" in message
    else:  # past what a tensor can hold, even on the meta device
        assert caught.value.file == CONFIG_FILE and "config.json's sizes cannot be built" in message
    assert builds == []  # no real network was built


@pytest.mark.parametrize(
    ("value", "problem"), [(-5, "emb_dim: must be at least 1 (got -5)"), ("256", "emb_dim: must be a whole number (got '256')"),
                           (3.0, "emb_dim: must be a whole number (got 3.0)"), (True, "emb_dim: must be a whole number")],
)  # fmt: skip
def test_a_wrong_type_is_named_with_its_file(folder: Path, builds: list[object], value: object, problem: str) -> None:
    _edit(folder, emb_dim=value)
    with pytest.raises(ModelFolderError) as caught:
        load_model_folder(folder)
    assert caught.value.file == CONFIG_FILE and problem in str(caught.value)
    assert str(caught.value.reason).startswith("config.json: ")
    assert builds == []


@pytest.mark.parametrize(("field", "value"), [("dropout", -0.5), ("dropout", "0.1"), ("score", 7), ("pad_id", -1)])
def test_other_fields_are_checked_too(folder: Path, field: str, value: object) -> None:
    _edit(folder, **{field: value})
    with pytest.raises(ModelFolderError, match=f"config.json: .*{field}") as caught:
        load_model_folder(folder)
    assert caught.value.file == CONFIG_FILE


def test_a_header_that_lies_about_its_length_is_named(folder: Path, builds: list[object]) -> None:
    data = (folder / WEIGHTS_FILE).read_bytes()
    (folder / WEIGHTS_FILE).write_bytes(struct.pack("<Q", 10**12) + data[8:])
    with pytest.raises(ModelFolderError, match="model.safetensors could not be read: its header claims") as caught:
        load_model_folder(folder)
    assert caught.value.file == WEIGHTS_FILE and builds == []


def test_a_tensor_whose_bytes_do_not_fit_its_shape_is_named(folder: Path) -> None:
    data = (folder / WEIGHTS_FILE).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    name = next(n for n in header if n != "__metadata__")
    header[name]["shape"] = [s * 2 for s in header[name]["shape"]]
    text = json.dumps(header).encode()
    text += b" " * (length - len(text)) if len(text) <= length else b""
    (folder / WEIGHTS_FILE).write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length :])
    with pytest.raises(ModelFolderError, match=f"tensor '{name}'") as caught:
        load_model_folder(folder)
    assert caught.value.file == WEIGHTS_FILE


def test_a_good_folder_still_loads(folder: Path, builds: list[object]) -> None:
    assert load_model_folder(folder).id == folder.name and len(builds) == 1
