"""One residency for all: without ``max_loaded`` the registry's bound is the number of folders,
every model is loaded at start-up into the same :class:`Residency` the bounded mode uses, in
folder order, and none is ever unloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnscope.engine.errors import UnknownModel
from attnscope.engine.registry import ModelRegistry
from attnscope.testing import TINY_KINDS, build_tiny_models


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("registry")
    build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")])
    (root / "en-de-broken").mkdir()
    (root / "en-de-broken" / "config.json").write_text("{")  # malformed: listed as unavailable
    return root


def test_unbounded_is_a_bound_of_every_folder(models: Path) -> None:
    registry = ModelRegistry(models, torch.device("cpu"), max_tokens=100)
    registry.load_all()
    residency = registry.residency
    assert residency.bound == 3  # the folders found, the broken one included
    assert registry.ids == list(residency.folders) == ["en-de-rnn-additive", "en-de-transformer"]
    assert registry.loaded == 2 and registry.progress() == (3, 3)
    for model_id in registry.ids:
        assert registry.get(model_id) is residency.resident[model_id]
        with registry.pinned(model_id) as served:
            assert served is residency.resident[model_id]
    assert [info.state for info in registry.describe()] == ["loaded", "loaded"]
    assert all("state" not in card for card in registry.page_cards() if "error" not in card)  # pages as before
    assert [u.id for u in registry.unavailable()] == ["en-de-broken"]
    with pytest.raises(UnknownModel, match="unavailable"):
        registry.get("en-de-broken")
    assert set(residency.resident) == {"en-de-rnn-additive", "en-de-transformer"}  # nothing unloaded


def test_a_bound_below_the_folders_lists_and_loads_the_first(models: Path) -> None:
    registry = ModelRegistry(models, torch.device("cpu"), max_tokens=100, max_loaded=1)
    registry.load_all()
    assert registry.residency.bound == 1
    assert registry.ids == ["en-de-rnn-additive", "en-de-transformer"]
    assert list(registry.residency.resident) == ["en-de-rnn-additive"]
    assert [info.state for info in registry.describe()] == ["loaded", "not_loaded"]
    assert [card["state"] for card in registry.page_cards() if "error" not in card] == ["loaded", "not_loaded"]
