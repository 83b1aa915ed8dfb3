"""R-Drop and sequence-level distillation (attnscope.training.recipes)."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import pytest
import torch

from attnscope.cli import main
from attnscope.nn.config import PAD_ID
from attnscope.training.data import DataError
from attnscope.training.recipes import doubled, rdrop_kl, read_distilled, write_distilled
from attnscope.training.train import TrainRun, train
from tests.training.test_train import FAST, model_config


def test_rdrop_kl_is_zero_for_equal_halves_and_positive_and_symmetric_otherwise() -> None:
    torch.manual_seed(0)
    half = torch.randn(2, 3, 7)
    gold = torch.tensor([[4, 5, PAD_ID], [6, PAD_ID, PAD_ID]])
    assert rdrop_kl(torch.cat(doubled(half)), gold, PAD_ID).item() == pytest.approx(0.0, abs=1e-6)
    other = torch.randn(2, 3, 7)
    forward = rdrop_kl(torch.cat([half, other]), gold, PAD_ID)
    backward = rdrop_kl(torch.cat([other, half]), gold, PAD_ID)
    assert forward.item() > 0
    assert forward.item() == pytest.approx(backward.item(), rel=1e-5)


def test_rdrop_kl_ignores_padded_positions() -> None:
    torch.manual_seed(1)
    a, b = torch.randn(1, 3, 5), torch.randn(1, 3, 5)
    gold = torch.tensor([[4, PAD_ID, PAD_ID]])
    changed = b.clone()
    changed[0, 1:] += 10.0  # only where gold is padding
    assert rdrop_kl(torch.cat([a, b]), gold, PAD_ID).item() == pytest.approx(
        rdrop_kl(torch.cat([a, changed]), gold, PAD_ID).item(), rel=1e-6
    )


def test_distilled_pairs_round_trip_through_a_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "kd" / "train.tsv.gz"
    written = write_distilled(path, ["A dog\truns.", "Empty one.", "Two  cats."], ["Ein Hund\nrennt.", " ", "Zwei Katzen."])
    assert written == 2  # the empty translation is left out
    assert read_distilled(path) == [("A dog runs.", "Ein Hund rennt."), ("Two cats.", "Zwei Katzen.")]
    assert not list(path.parent.glob("*.part"))


def test_a_malformed_distillation_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("A dog runs.\tEin Hund rennt.\nno tab here\n")
    with pytest.raises(DataError, match="line 2"):
        read_distilled(path)
    with pytest.raises(DataError, match="does not exist"):
        read_distilled(tmp_path / "missing.tsv")


def test_training_with_rdrop_and_distilled_pairs_writes_a_model(tiny_corpus: Path, tmp_path: Path) -> None:
    """Hand-written "teacher" pairs are added to the 10 training pairs; R-Drop doubles each batch."""
    distilled = tmp_path / "kd.tsv"
    write_distilled(distilled, ["A dog runs.", "A cat sleeps."], ["Ein Hund rennt.", "Eine Katze schläft."])
    config = dataclasses.replace(FAST, max_epochs=1, rdrop_alpha=5.0, distill_file=str(distilled))
    card = train(model_config("transformer", "additive"), config, TrainRun(data_dir=tiny_corpus, out_dir=tmp_path / "model",
                 run_dir=tmp_path / "run", evaluate_test=False, progress=False))
    assert card["training"]["distilled_pairs"] == 2
    assert card["training"]["train_pairs"] == 10 + 2
    assert card["hyperparameters"]["training"]["rdrop_alpha"] == 5.0
    assert card["curve"][0]["train_loss"] > 0
    assert (tmp_path / "model" / "model.safetensors").is_file()


def test_rdrop_changes_the_gradient_only_through_the_kl_term(tiny_corpus: Path, tmp_path: Path) -> None:
    """Without dropout both passes agree, so R-Drop's KL is 0 and training equals plain training."""
    plain = dataclasses.replace(FAST, max_epochs=1, seed=3)
    cards = [
        train(model_config("transformer", "additive"), dataclasses.replace(plain, rdrop_alpha=alpha), TrainRun(data_dir=tiny_corpus,
              out_dir=tmp_path / f"m{alpha}", run_dir=tmp_path / f"r{alpha}", evaluate_test=False, progress=False))
        for alpha in (0.0, 4.0)
    ]
    assert cards[0]["curve"][0]["train_loss"] == pytest.approx(cards[1]["curve"][0]["train_loss"], rel=1e-4)


def test_distill_command_writes_the_teachers_translations(tiny_corpus: Path, tmp_path: Path) -> None:
    teacher = tmp_path / "teacher"
    train(model_config("transformer", "additive"), dataclasses.replace(FAST, max_epochs=1), TrainRun(data_dir=tiny_corpus,
          out_dir=teacher, run_dir=tmp_path / "run", evaluate_test=False, progress=False))
    out = tmp_path / "kd.tsv.gz"
    assert main(["distill", str(teacher), "--out", str(out), "--split", "val", "--data-dir", str(tiny_corpus),
                 "--beam", "2", "--device", "cpu"]) == 0
    pairs = read_distilled(out)
    assert 1 <= len(pairs) <= 4
    assert main(["distill", str(teacher), "--out", str(out), "--beam", "0", "--data-dir", str(tiny_corpus)]) == 2
