"""The shipped vision models (models/vision-*): complete, small, fp16, and their cards carry the
measured test numbers and learning curves the README and the Vision page quote."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnscope.vision import folders
from attnscope.vision.captioner import greedy
from attnscope.vision.ram import RecurrentAttentionModel

MODELS = Path(__file__).resolve().parents[2] / "models"
SHIPPED = {
    "vision-ram-translated": ("ram", "translated"),
    "vision-ram-cluttered": ("ram", "cluttered"),
    "vision-cnn-translated": ("full-image-cnn", "translated"),
    "vision-cnn-cluttered": ("full-image-cnn", "cluttered"),
    "vision-sat-scenes": ("captioner", "scenes"),
    "vision-noattn-scenes": ("captioner", "scenes"),
}


def test_every_shipped_folder_is_there() -> None:
    assert set(SHIPPED) <= {p.name for p in folders.discover(MODELS)}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_model(name: str) -> None:
    folder = MODELS / name
    assert sum(f.stat().st_size for f in folder.iterdir()) <= 10 * 2**20
    weights = load_file(str(folder / folders.WEIGHTS_FILE))
    assert all(t.dtype == torch.float16 for t in weights.values() if t.is_floating_point())
    loaded = folders.load_folder(folder)
    assert (loaded.kind, loaded.dataset) == SHIPPED[name]
    card = loaded.card
    assert card["test"]["split"] == "test" and len(card["curve"]) >= 2
    assert card["training"]["time_s"] > 0 and card["parameters"] == loaded.num_parameters
    if loaded.kind == "captioner":
        assert card["test"]["examples"] == 2000 and 0 < card["test"]["bleu"] <= 100
        assert card["test"]["bleu"] < card["test"]["chrf"] < 100 and "nc:6|nw:0" in card["test"]["chrf_signature"]
        run = card["test"].get("chrf_run")  # chrF added later: the BLEU of the captions it scored beside the card's
        assert run is None or (0 < run["bleu"] <= 100 and 0 <= run["exact_match"] <= 1)
        (ids,), (att,) = greedy(loaded.model, torch.zeros(1, 1, 84, 84))  # type: ignore[arg-type]
        assert torch.allclose(att.sum(-1), torch.ones(len(ids)))
    else:
        assert card["test"]["examples"] == 10_000 and card["test"]["accuracy"] > 0.3
    if isinstance(loaded.model, RecurrentAttentionModel):
        assert len(card["test"]["by_glimpse"]) == loaded.model.config.glimpses


def test_ram_and_its_baseline_have_the_same_size() -> None:
    ram = folders.load_folder(MODELS / "vision-ram-cluttered").num_parameters
    cnn = folders.load_folder(MODELS / "vision-cnn-cluttered").num_parameters
    assert abs(ram - cnn) / ram < 0.02
