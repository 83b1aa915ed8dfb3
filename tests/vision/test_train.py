"""Training end to end on synthetic Fashion-MNIST files: a few steps on tiny models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import sacrebleu
import torch
from safetensors.torch import load_file

from attnscope.cli import main
from attnscope.vision import folders
from attnscope.vision.train import TrainSettings, train

TINY = TrainSettings(steps=4, batch=8, eval_every=2, val_examples=10, test_examples=20, test_scenes=6, beam_size=2)
TINY_RAM = {"glimpses": 2, "hidden": 16, "glimpse_hidden": 8}


@pytest.mark.parametrize(
    ("kind", "dataset", "overrides"),
    [
        ("ram", "cluttered", TINY_RAM),
        ("full-image-cnn", "translated", TINY_RAM),  # width matched to this tiny RAM
        ("captioner", "scenes", {"channels": [4, 8, 8], "embed": 8, "hidden": 16, "attn_dim": 8, "max_len": 6}),
    ],
)
def test_training_writes_a_folder_that_loads_back(
    tmp_path: Path, fashion_dir: Path, kind: str, dataset: str, overrides: dict
) -> None:
    out = tmp_path / f"vision-{kind}"
    card = train(kind, dataset, out_dir=out, settings=TINY, overrides=overrides, data_dir=fashion_dir,
                 device="cpu", progress=False)
    assert [p["step"] for p in card["curve"]] == [2, 4]
    assert all("train_loss" in p for p in card["curve"])
    assert card["test"]["split"] == "test"
    if kind == "captioner":
        assert card["test"]["examples"] == 6 and 0 <= card["test"]["exact_match"] <= 1
        pairs = card["test"]["samples"]  # all six: BLEU and chrF are sacreBLEU's of these captions
        generated, references = [p["generated"] for p in pairs], [[p["reference"] for p in pairs]]
        assert card["test"]["chrf"] == round(sacrebleu.corpus_chrf(generated, references).score, 2)
        assert card["test"]["bleu"] == round(sacrebleu.corpus_bleu(generated, references, tokenize="none").score, 2)
        assert card["test"]["attention_in_cell"] is None or 0 <= card["test"]["attention_in_cell"] <= 1
    else:
        assert card["test"]["examples"] == 20 and 0 <= card["test"]["accuracy"] <= 1
    if kind == "ram":
        assert len(card["test"]["by_glimpse"]) == 2
    loaded = folders.load_folder(out)
    assert loaded.kind == kind and loaded.dataset == dataset and loaded.id == out.name
    assert json.loads((out / "card.json").read_text())["curve"] == card["curve"]
    weights = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float16 for t in weights.values() if t.is_floating_point())
    for name, value in loaded.model.state_dict().items():  # fp16 on disk, fp32 in memory, same values
        assert torch.equal(value, weights[name].float())
    if kind == "full-image-cnn":
        ram = folders.build("ram", TINY_RAM)
        assert abs(loaded.num_parameters - sum(p.numel() for p in ram.parameters())) < 0.1 * loaded.num_parameters


def test_training_refuses_mismatched_datasets(fashion_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="captioners train on scenes"):
        train("ram", "scenes", out_dir=tmp_path, settings=TINY, data_dir=fashion_dir, progress=False)


def test_cli_trains_and_evaluates(fashion_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "noattn"
    args = ["vision-train", "--model", "captioner", "--no-attention", "--out", str(out), "--data-dir", str(fashion_dir),
            "--steps", "2", "--eval-every", "1", "--batch", "4", "--val-examples", "4", "--test-scenes", "3",
            "--quiet", "--set", "hidden=8", "--set", "embed=8", "--set", "channels=[2,4,4]"]
    assert main(args) == 0
    assert folders.load_folder(out).model.config.attention is False  # type: ignore[union-attr]
    evaluate = ["vision-evaluate", str(out), "--data-dir", str(fashion_dir), "--test-scenes", "5", "--update-card"]
    assert main([*evaluate, "--beam", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["beam_size"] == 1 and printed["examples"] == 5
    assert json.loads((out / "card.json").read_text())["test"]["beam_size"] == 1
    assert main([*evaluate, "--beam", "2"]) == 0
    card = json.loads((out / "card.json").read_text())
    assert card["test"]["beam_size"] == 1 and card["test_by_beam"]["2"]["beam_size"] == 2


def test_cli_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = ["vision-train", "--model", "ram", "--out", str(tmp_path / "x"), "--data-dir", str(tmp_path / "none")]
    assert main(missing) == 2
    err = capsys.readouterr().err
    assert "apt-get install dataset-fashion-mnist" in err and "Traceback" not in err
    assert main(["vision-train", "--model", "ram", "--no-attention", "--out", str(tmp_path / "y")]) == 2
    assert "--no-attention applies to --model captioner" in capsys.readouterr().err
    assert main(["vision-train", "--model", "ram", "--steps", "0", "--out", str(tmp_path / "z")]) == 2
    assert "--steps must be positive" in capsys.readouterr().err


def test_training_continues_from_a_folder_and_keeps_its_numbers(fashion_dir: Path, tmp_path: Path) -> None:
    """``--init``: the weights the run starts from are the folder's (zero steps change nothing),
    and the earlier run's training and test numbers go into the card's history."""
    first = tmp_path / "first"
    card = train("ram", "translated", out_dir=first, settings=TINY, overrides=TINY_RAM, data_dir=fashion_dir,
                 device="cpu", progress=False)
    same = tmp_path / "same"
    zero = TrainSettings(steps=4, max_time_s=1e-9, batch=8, eval_every=2, val_examples=10, test_examples=20,
                         init=str(first))
    again = train("ram", "translated", out_dir=same, settings=zero, data_dir=fashion_dir, device="cpu",
                  progress=False)
    assert again["training"]["steps"] == 0 and again["training"]["steps_before"] == 4
    assert again["history"] == [{k: card[k] for k in ("training", "hyperparameters", "test")}]
    assert again["curve"] == card["curve"]  # no step, no new point
    more = train("ram", "translated", out_dir=tmp_path / "more", data_dir=fashion_dir, device="cpu", progress=False,
                 settings=TrainSettings(steps=2, batch=8, eval_every=2, val_examples=10, test_examples=20,
                                        init=str(first)))
    assert more["curve"][: len(card["curve"])] == card["curve"]  # one curve over both runs, steps counted on
    assert [(p["step"], p["run"]) for p in more["curve"][len(card["curve"]) :]] == [(6, 1)]
    before, after = load_file(str(first / "model.safetensors")), load_file(str(same / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="trained on translated, not cluttered"):
        train("ram", "cluttered", out_dir=tmp_path / "x", settings=replace(TINY, init=str(first)), data_dir=fashion_dir,
              progress=False)
    with pytest.raises(ValueError, match="--set does not apply"):
        train("ram", "translated", out_dir=tmp_path / "y", settings=replace(TINY, init=str(first)), overrides=TINY_RAM,
              data_dir=fashion_dir, progress=False)
