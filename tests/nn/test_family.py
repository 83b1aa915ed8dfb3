"""The family registry: every shipped model and every architecture resolves to a family; the
geometry a family reports is its models' real one (every head it names can be switched off, the
scores it reads have its shapes); a family registered from outside works like a shipped one."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import torch

from attnscope.anatomy import anatomy
from attnscope.nn.ablation import disabled_heads
from attnscope.nn.config import ARCHITECTURES, RNNConfig, config_from_dict, config_to_dict
from attnscope.nn.factory import build_model
from attnscope.nn.family import (
    Family,
    Geometry,
    families,
    family,
    family_of,
    geometry_of,
    register,
    unregister,
)
from attnscope.nn.recurrent_family import RNNFamily
from attnscope.repository import discover
from attnscope.testing import tiny_config

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
SHIPPED = discover(MODELS_DIR)


def test_every_architecture_has_a_family() -> None:
    assert set(ARCHITECTURES) <= set(families())
    for tag, fam in families().items():
        assert fam.architecture == tag and fam.label and isinstance(fam, Family)


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_model_resolves_to_a_family(folder: Path) -> None:
    config = config_from_dict(json.loads((folder / "config.json").read_text())["model"])
    g = geometry_of(config)
    assert g.kinds == config.attention_kinds and g.heads == config.num_heads and g.decoder_layers == config.layers
    assert g.source_positions == config.source_positions and g.target_positions == config.target_positions
    assert g.key_dim * g.heads in {getattr(config, "d_model", None), getattr(config, "hidden_dim", None)}


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_geometry_is_the_models_own(architecture: str) -> None:
    """Every (kind, layer, head) the geometry names can be switched off, none past it, and the
    anatomy's scores have its shapes."""
    config = tiny_config(architecture, "additive", 40)
    model = build_model(config).eval()
    g = geometry_of(config)
    for kind, (layers, heads) in g.shapes().items():
        with disabled_heads(model, [(kind, layers - 1, heads - 1)]):
            pass
        with pytest.raises(ValueError, match="no layer"), disabled_heads(model, [(kind, layers, 0)]):
            pass
    found = anatomy(model, [5, 6, 7, 3], [8, 9, 3])
    assert {k: tuple(v.shape[:2]) for k, v in found.scores.items()} == g.shapes()
    assert found.contexts is not None and found.contexts.shape[-1] == g.key_dim


def test_an_unknown_architecture_names_the_registered_ones() -> None:
    with pytest.raises(ValueError, match="transformer"):
        family("lstm")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(RNNConfig):
    """A family from outside the package: a GRU encoder–decoder under its own tag."""

    architecture: Literal["toy_gru"] = "toy_gru"  # type: ignore[assignment]


class ToyFamily(RNNFamily):
    architecture: ClassVar[str] = "toy_gru"
    label: ClassVar[str] = "Toy GRU"
    config_class: ClassVar[type] = ToyConfig


@pytest.fixture
def toy() -> Iterator[Family]:
    registered = register(ToyFamily())
    try:
        yield registered
    finally:
        unregister("toy_gru")


def test_a_registered_family_builds_saves_and_reads_back(toy: Family) -> None:
    config = tiny_config("toy_gru", "dot", 40)
    assert family_of(config) is toy and isinstance(config, ToyConfig)
    assert config_from_dict(config_to_dict(config)) == config
    assert isinstance(geometry_of(config), Geometry) and geometry_of(config).kinds == ("cross",)
    model = build_model(config)
    out = model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]]), need_weights=True)
    assert out.cross is not None and out.cross.shape == (1, 1, 1, 2, 3)


def test_unregister_forgets_the_config_too(toy: Family) -> None:
    unregister("toy_gru")
    with pytest.raises(ValueError, match="unknown architecture"):
        config_from_dict({"architecture": "toy_gru", "vocab_size": 40})
    register(toy)
