"""``GET /api/models`` carries each card's per-head numbers: alignment F1/AER grids (``evaluate
--alignment``) and BLEU with each head off (written here by the real ``evaluate --ablate``); a
section that does not fit the model is left out with a warning, never a 500."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from attnscope.cli import main
from attnscope.testing import TINY_PAIRS

F1 = [[0.25, 0.75], [0.5, 0.875]]
SCORES = {"precision": 0.5, "recall": 0.5, "f1": 0.5, "aer": 0.5}
ALIGNMENT = {  # every key `attnscope evaluate --alignment` writes, for a 2 x 2 model
    "split": "test2016", "convention": "teacher-forced", "sentences": 10,
    "f1": F1, "aer": [[1 - v for v in row] for row in F1], "precision": F1, "recall": F1,
    "per_layer": [SCORES, SCORES], "average_of_heads": SCORES, "diagonal": {**SCORES, "f1": 0.55},
    "best_head": {"layer": 1, "head": 1, "f1": 0.875}, "worst_head": {"layer": 0, "head": 0, "f1": 0.25},
}  # fmt: skip


def write_card(folder: Path, **sections: Any) -> None:
    card = json.loads((folder / "card.json").read_text())
    (folder / "card.json").write_text(json.dumps({**card, **sections}))


@pytest.fixture(scope="module")
def models(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Transformer with ALIGNMENT and an ablation from the CLI, and the additive RNN."""
    root = tmp_path_factory.mktemp("head-scores")
    for name in ("en-de-transformer", "en-de-rnn-additive"):
        shutil.copytree(tiny_models_dir / name, root / name)
    corpus = tmp_path_factory.mktemp("head-scores-corpus")
    for side, lang in enumerate(("en", "de")):
        (corpus / f"test_2016_flickr.{lang}").write_text("".join(p[side] + "\n" for p in TINY_PAIRS))
    folder = root / "en-de-transformer"
    assert main(["evaluate", str(folder), "--data-dir", str(corpus), "--ablate", "--beam", "1", "--update-card"]) == 0
    write_card(folder, alignment=ALIGNMENT)
    return root


def models_of(client_for: Any, root: Path) -> dict[str, dict[str, Any]]:
    with client_for(root) as c:
        answer = c.get("/api/models")
    assert answer.status_code == 200, answer.text
    return {m["id"]: m for m in answer.json()["models"]}


def page_cards(client_for: Any, root: Path) -> dict[str, dict[str, Any]]:
    """The cards the server renders into every page (the explorer and Models page read them)."""
    with client_for(root) as c:
        html = c.get("/models").text
    start = html.index('id="cards-data">') + len('id="cards-data">')
    return {card["id"]: card for card in json.loads(html[start : html.index("</script>", start)])}


def test_models_carry_the_cards_alignment_and_ablation_grids(models: Path, client_for: Any) -> None:
    info = models_of(client_for, models)
    transformer = info["en-de-transformer"]
    assert transformer["alignment"]["f1"] == F1 and transformer["alignment"]["best_head"] == ALIGNMENT["best_head"]
    assert transformer["alignment"]["diagonal"]["f1"] == 0.55
    card = json.loads((models / "en-de-transformer" / "card.json").read_text())
    assert transformer["ablation"]["bleu_without_head"] == card["ablation"]["bleu_without_head"]
    assert set(transformer["ablation"]["bleu_without_head"]) == {"cross", "encoder_self", "decoder_self"}
    assert transformer["ablation"]["baseline"] == card["ablation"]["baseline"] and transformer["warnings"] == []
    rnn = info["en-de-rnn-additive"]  # a card without them: null, and no warning
    assert (rnn["alignment"], rnn["ablation"], rnn["warnings"]) == (None, None, [])


def test_a_section_that_does_not_fit_the_model_is_left_out_with_a_warning(
    models: Path, tmp_path: Path, client_for: Any
) -> None:
    root = tmp_path / "models"
    shutil.copytree(models, root)
    wide = {**ALIGNMENT, "f1": [[0.5] * 8] * 3}  # a 3 x 8 model's card copied onto a 2 x 2 one
    write_card(root / "en-de-transformer", alignment=wide, ablation={"split": "test2016", "baseline": "high"})
    write_card(root / "en-de-rnn-additive", alignment=ALIGNMENT)  # 2 x 2 on a 1 x 1 RNN
    info = models_of(client_for, root)
    transformer, rnn = info["en-de-transformer"], info["en-de-rnn-additive"]
    assert (transformer["alignment"], transformer["ablation"], rnn["alignment"]) == (None, None, None)
    assert any("'alignment' left out, its grid is (3, 8) but the model's cross-attention is (2, 2)" in w for w in transformer["warnings"])
    assert any("'ablation' left out, it does not parse" in w for w in transformer["warnings"])
    assert any("cross-attention is (1, 1)" in w for w in rnn["warnings"])
    cards = page_cards(client_for, root)  # the pages never see a section that does not fit
    assert "alignment" not in cards["en-de-rnn-additive"] and "ablation" not in cards["en-de-transformer"]
    assert cards["en-de-rnn-additive"]["warnings"] == rnn["warnings"]
    assert page_cards(client_for, models)["en-de-transformer"]["alignment"] == ALIGNMENT  # one that fits is kept


def test_the_fields_are_in_the_openapi_schema(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"alignment", "ablation"} <= set(schemas["ModelInfo"]["properties"])
    assert "f1" in schemas["CardAlignment"]["properties"] and "bleu_without_head" in schemas["CardAblation"]["properties"]
