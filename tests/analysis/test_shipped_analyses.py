"""The head analyses shipped beside the Transformers (models/<id>/analysis/heads.json): one entry
per head the model has, roles by the documented rules, small, and the models folder with them
inside its budget."""

from __future__ import annotations

import pytest

from attnscope.analysis.roles import ROLES, assign_role
from attnscope.analysis.summary import read_summary, summary_path
from attnscope.config import REPO_ROOT
from attnscope.repository import read_config

MODELS_DIR = REPO_ROOT / "models"
MIB = 1024 * 1024
ANALYSED = ["en-de-transformer", "en-de-transformer-aligned", "en-fr-transformer", "en-fr-transformer-aligned"]


@pytest.mark.parametrize("name", ANALYSED)
def test_each_transformer_ships_its_heads_roles(name: str) -> None:
    path = summary_path(MODELS_DIR / name)
    assert path.stat().st_size < 32 * 1024
    document = read_summary(path)
    assert document["model"] == name and document["corpus"] == "train.en.gz" and document["mode"] == "teacher-forced"
    assert document["sentences"] >= 3000
    config, _ = read_config(MODELS_DIR / name)
    layers = {"encoder_self": config.encoder_layers, "decoder_self": config.decoder_layers, "cross": config.decoder_layers}
    expected = {(k, la, h) for k in config.attention_kinds for la in range(layers[k]) for h in range(config.heads)}
    heads = document["heads"]
    assert {(h["kind"], h["layer"], h["head"]) for h in heads} == expected and len(heads) == len(expected)
    for h in heads:
        assert h["role"] in ROLES
        # Rounded means re-derive the role, unless a mean sits within rounding of a threshold.
        means = {k.removesuffix("_mean"): v for k, v in h.items() if k.endswith("_mean") or k == "alignment_f1"}
        role, _ = assign_role(means)
        assert role == h["role"] or any(abs(v - t) < 1e-3 for v in h.values() if isinstance(v, float) for t in (0.3, 0.5))
    assert any(h["role"] == "alignment" for h in heads)


def test_the_models_folder_with_the_analyses_stays_small() -> None:
    sizes = {p: p.stat().st_size for p in MODELS_DIR.rglob("*") if p.is_file()}
    assert sum(sizes.values()) <= 200 * MIB
    for name in ANALYSED:
        assert sum(s for p, s in sizes.items() if p.is_relative_to(MODELS_DIR / name)) <= 25 * MIB
