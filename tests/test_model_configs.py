"""Every ``config.json`` under ``models/`` loads into its architecture's config class, round-trips,
and reads the same from its version-1 (flat) form, the one the folders were first written in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnscope.nn.config import CONFIG_CLASSES, config_from_dict, config_to_dict
from attnscope.repository import CONFIG_FILE, discover, read_config

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
FOLDERS = discover(MODELS_DIR)

# Version 1's defaults for the fields a flat record carried for the other architectures.
V1_DEFAULTS = {
    "score": "additive", "emb_dim": 256, "hidden_dim": 256, "max_source_positions": 256, "d_model": 256,
    "heads": 4, "ff_dim": 1024, "encoder_layers": 3, "decoder_layers": 3, "pre_norm": True, "max_positions": 512,
}  # fmt: skip


def test_there_are_model_folders() -> None:
    assert len(FOLDERS) >= 7


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_each_shipped_config_loads_and_round_trips(folder: Path) -> None:
    config, meta = read_config(folder)
    assert type(config) is CONFIG_CLASSES[meta["model"]["architecture"]]
    assert config_from_dict(config_to_dict(config)) == config
    if meta["format_version"] == 1:  # a folder not yet migrated still loads
        return
    assert meta["model"] == config_to_dict(config)  # nothing in the file that the class lacks
    flat = {**V1_DEFAULTS, **meta["model"]}
    assert config_from_dict(flat, version=1) == config


def test_a_version_1_folder_loads(tmp_path: Path) -> None:
    source = next(f for f in FOLDERS if read_config(f)[0].architecture == "transformer")
    meta = json.loads((source / CONFIG_FILE).read_text())
    flat = {"format_version": 1, **{k: v for k, v in meta.items() if k != "format_version"}}
    flat["model"] = {**V1_DEFAULTS, **meta["model"]}  # "score": "additive" on a Transformer, as before
    (tmp_path / CONFIG_FILE).write_text(json.dumps(flat))
    assert read_config(tmp_path)[0] == read_config(source)[0]
