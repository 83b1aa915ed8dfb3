"""scripts/recipe_table.py: the recipe-search table and learning curves from run folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from attnscope.testing import REPO_ROOT, tiny_tokenizer

SCRIPT = REPO_ROOT / "scripts" / "recipe_table.py"


def run_folder(root: Path, name: str, val: float, test: float, *, history: bool = False) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    tiny_tokenizer(byte_fallback=name.endswith("bf")).save(folder / "tokenizer.model")
    card = {
        "source_lang": "en",
        "target_lang": "de",
        "parameters": 7_320_576,
        "hyperparameters": {
            "model": {"encoder_layers": 4, "decoder_layers": 4, "ff_dim": 512, "dropout": 0.3, "attention_dropout": 0.1},
            "training": {"label_smoothing": 0.2},
        },
        "training": {"epochs": 3, "time_s": 780.0, "best_val_bleu": val, "selected": "best epoch 3"},
        "curve": [{"epoch": e, "val_bleu": val * e / 3} for e in (1, 2, 3)],
        "bleu": {s: {"lowercase_13a": test + i} for i, s in enumerate(("test2016", "test2017", "mscoco2017"))},
    }
    if history:
        card["history"] = [{"replaced_on": "2026-11-22", "architecture": "old <unk> one", "best_val_bleu": 1.5,
                            "parameters": 7_578_624, "bleu": {"test2016": {"lowercase_13a": 2.0}}}]  # fmt: skip
    (folder / "card.json").write_text(json.dumps(card))
    return folder


def test_table_rows_best_val_first_with_history_and_curves(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "out", "en-de-tf-a-bf", 40.28, 39.61)
    b = run_folder(tmp_path / "models", "en-de-transformer", 39.5, 40.01, history=True)
    svg = tmp_path / "curves.svg"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(b), str(a), "--curves", str(svg)], capture_output=True, text=True, check=True
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| en-de")]
    assert [r.split(" | ")[0] for r in rows] == ["| en-de-tf-a-bf", "| en-de-transformer (shipped)", "| en-de-transformer until 2026-11-22"]
    first = [c.strip() for c in rows[0].strip("|").split("|")]
    assert first[1:6] == ["4+4", "512", "0.30/0.10/0.30", "0.2", "best epoch 3"]  # no activation dropout: the residual's
    assert first[-6:] == ["byte fallback", "40.28", "0.0", "39.61", "40.61", "41.61"]
    assert "NFKC, `<unk>`" in rows[1] and rows[2].endswith("| 1.50 |  | 2.00 | – | – |")
    assert "en-de-transformer until 2026-11-22: old `<unk>` one" in done.stdout
    drawing = svg.read_text()
    assert drawing.startswith("<svg") and drawing.count("<polyline") == 2  # one line per run with a curve
    assert "en-de-tf-a-bf (40.28)" in drawing


def test_two_replacements_on_one_day_are_told_apart_by_version(tmp_path: Path) -> None:
    folder = run_folder(tmp_path / "models", "en-fr-transformer", 60.1, 61.8, history=True)
    card = json.loads((folder / "card.json").read_text())
    second = {"replaced_on": "2026-11-23", "architecture": "distilled", "best_val_bleu": 58.9, "parameters": 7_320_576}
    first = {**second, "architecture": "deep", "best_val_bleu": 57.8}
    card["history"] = [second, first, *card["history"]]  # newest first, as the cards keep it
    (folder / "card.json").write_text(json.dumps(card))
    done = subprocess.run([sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, check=True)
    runs = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| en-fr")]
    assert runs == [
        "| en-fr-transformer (shipped)", "| en-fr-transformer v3 until 2026-11-23",
        "| en-fr-transformer v2 until 2026-11-23", "| en-fr-transformer until 2026-11-22",
    ]
    assert "en-fr-transformer v3 until 2026-11-23: distilled" in done.stdout


def test_a_folder_without_a_card_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and f"no card.json in {tmp_path}" in done.stderr
