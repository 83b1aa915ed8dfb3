"""The ``attnscope`` command end to end on a tiny corpus: train with a preset and overrides,
evaluate a folder to JSON; every mistake is one ``attnscope <cmd>: error: ...`` line, exit 2."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
from pathlib import Path

import pytest
import torch

from attnscope.cli import main
from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS
from attnscope.training import data
from attnscope.training.data import SPLITS, TEST_SPLITS
from attnscope.translator import Translator

torch.set_num_threads(1)  # tiny models; threads only add overhead on a busy machine


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every en-de split of Multi30k, each the ten tiny pairs, as gz files."""
    folder = tmp_path_factory.mktemp("multi30k")
    for stem in SPLITS.values():
        for side, lang in enumerate(("en", "de")):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.writelines(pair[side] + "\n" for pair in TINY_PAIRS)
    return folder


def train_args(corpus: Path, root: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--preset",
        "tiny",
        "--data-dir",
        str(corpus),
        "--out",
        str(root / "model"),
        "--run-dir",
        str(root / "run"),
        "--vocab-size",
        "120",
        "--max-steps",
        "2",
        "--quiet",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder written by ``attnscope train --preset tiny``."""
    root = tmp_path_factory.mktemp("cli-train")
    assert main(train_args(corpus, root)) == 0
    return root / "model"


def assert_clean_error(capsys: pytest.CaptureFixture[str], command: str, *problem: str) -> None:
    err = capsys.readouterr().err
    assert f"attnscope {command}: error: " in err and "Traceback" not in err
    for text in problem:
        assert text in err, err


def test_train_with_a_preset_writes_a_model_folder(trained: Path) -> None:
    assert sorted(p.name for p in trained.iterdir()) == [
        "card.json",
        "complete.json",  # written last, when the rest is complete (attnscope.staging)
        "config.json",
        "model.safetensors",
        "tokenizer.model",
    ]
    card = json.loads((trained / "card.json").read_text())
    assert card["architecture"] == "transformer" and card["training"]["steps"] == 2
    assert card["hyperparameters"]["training"]["vocab_size"] == 120
    assert set(card["bleu"]) == set(TEST_SPLITS)
    loaded = load_model_folder(trained)
    assert loaded.config.d_model == 32  # the tiny preset's shape


def test_set_overrides_model_fields(corpus: Path, tmp_path: Path) -> None:
    args = train_args(
        corpus,
        tmp_path,
        "--set",
        "architecture=rnn",
        "--set",
        "hidden_dim=8",
        "--score",
        "general",
        "--no-test-eval",
    )
    assert main(args) == 0
    loaded = load_model_folder(tmp_path / "model")  # strict: the weights have the overridden shape
    assert (loaded.config.architecture, loaded.config.hidden_dim, loaded.config.score) == (
        "rnn",
        8,
        "general",
    )
    assert loaded.config.emb_dim == 32  # the rest still comes from the preset
    assert "bleu" not in loaded.card


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ("hidden_dim", "--set expects FIELD=VALUE, got 'hidden_dim'"),
        ("hiden_dim=8", "unknown model or training field 'hiden_dim'"),
        ("label_smoothing=lots", "--set label_smoothing expects float, got 'lots'"),
        ("attention_dropout=x", "--set attention_dropout expects float, got 'x'"),
        ("d_model=big", "--set d_model expects int, got 'big'"),
        # The tiny preset is a Transformer: RNN fields belong to another architecture.
        ("hidden_dim=8", "'hidden_dim' is a field of rnn and self_attentive_rnn models, not of transformer"),
        ("architecture=lstm", "unknown architecture 'lstm'"),
        ("dropout=high", "--set dropout expects float, got 'high'"),
        ("heads=3", "d_model=32 is not divisible by heads=3"),
    ],
)
def test_a_bad_set_is_a_clear_error_before_any_data_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], item: str, problem: str
) -> None:
    # The data folder does not exist either: the --set mistake is reported first.
    assert main(train_args(tmp_path / "no-data", tmp_path, "--set", item)) == 2
    assert_clean_error(capsys, "train", problem)
    assert not (tmp_path / "model").exists()


def test_score_on_a_transformer_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(train_args(tmp_path / "no-data", tmp_path, "--score", "dot")) == 2
    assert_clean_error(capsys, "train", "--score applies to the RNN models; a transformer has no alignment score")


def test_train_with_a_missing_data_dir_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-data"
    assert main(train_args(missing, tmp_path)) == 2
    assert_clean_error(capsys, "train", str(missing), "does not exist")
    assert not (tmp_path / "model").exists()


def test_train_with_a_file_missing_names_it(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partial = shutil.copytree(corpus, tmp_path / "data")
    (partial / "val.de.gz").unlink()
    assert main(train_args(partial, tmp_path)) == 2
    assert_clean_error(capsys, "train", f"missing {partial / 'val.de.gz'}")


def test_bad_arguments_exit_2_with_usage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--preset", "huge", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--preset", "tiny", "--pair", "ende", "--out", str(tmp_path)])
    assert "language pair must look like en-de" in capsys.readouterr().err


def test_evaluate_prints_json(
    trained: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "evaluate",
        str(trained),
        "--data-dir",
        str(corpus),
        "--splits",
        "test2016",
        "--beam",
        "2",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["beam_size"] == 2
    assert list(result["bleu"]) == ["test2016"] == list(result["bleu_by_length"])
    assert {"cased", "lowercase_13a", "signature_cased", "signature_lowercase"} == set(
        result["bleu"]["test2016"]
    )
    assert sum(r["sentences"] for r in result["bleu_by_length"]["test2016"]) == len(TINY_PAIRS)
    assert list(result["chrf"]) == ["test2016"] and "nc:6|nw:0" in result["chrf"]["test2016"]["signature"]


def test_evaluate_update_card_keeps_the_other_splits(
    trained: Path, corpus: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(trained, tmp_path / "model")
    before = json.loads((folder / "card.json").read_text())
    # as scripts/card_chrf.py leaves a card: chrF beside an older BLEU, which one split's run differed from
    before["chrf"]["test2017"]["bleu_same_run"] = {"cased": 1.0, "lowercase_13a": 1.0}
    before["chrf_run"] = {"script": "scripts/card_chrf.py", "splits": ["test2016", "test2017"]}
    (folder / "card.json").write_text(json.dumps(before))
    beam = str(before["beam_size"])
    args = [
        "evaluate",
        str(folder),
        "--data-dir",
        str(corpus),
        "--splits",
        "test2017",
        "--beam",
        beam,
        "--update-card",
    ]
    assert main(args) == 0
    after = json.loads((folder / "card.json").read_text())
    assert after["bleu"] == before["bleu"]  # same model, same beam: the same numbers, none lost
    assert after["bleu_by_length"] == before["bleu_by_length"]
    # test2017's BLEU and chrF now come from one run: it leaves chrf_run, test2016 stays on it
    assert set(after["chrf"]["test2017"]) == {"score", "signature"} and after["chrf"]["test2016"] == before["chrf"]["test2016"]
    assert after["chrf_run"] == {"script": "scripts/card_chrf.py", "splits": ["test2016"]}


def test_evaluate_attention_only_adds_the_entropy_and_keeps_the_rest(
    trained: Path, corpus: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(trained, tmp_path / "model")
    before = json.loads((folder / "card.json").read_text())
    assert set(before["attention_entropy"]) == set(TEST_SPLITS)  # training's evaluation wrote it
    (folder / "card.json").write_text(json.dumps({k: v for k, v in before.items() if k != "attention_entropy"}))
    args = ["evaluate", str(folder), "--data-dir", str(corpus), "--splits", "test2016", "--attention-only", "--update-card"]
    assert main(args) == 0
    after = json.loads((folder / "card.json").read_text())
    assert after["attention_entropy"] == {"test2016": before["attention_entropy"]["test2016"]}
    assert after["attention_entropy"]["test2016"]["rows"] > 0
    assert after["bleu"] == before["bleu"] and after["beam_size"] == before["beam_size"]


def test_evaluate_tunes_the_length_penalty_on_val_into_the_card(
    trained: Path, corpus: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(trained, tmp_path / "model")
    args = ["evaluate", str(folder), "--data-dir", str(corpus), "--beam", "2", "--tune-length-penalty", "--update-card"]
    assert main(args) == 0
    card = json.loads((folder / "card.json").read_text())
    decoding = card["decoding"]
    assert decoding["tuned_on"] == "val" and decoding["beam_size"] == 2
    assert decoding["length_penalty"] in (0.6, 1.0, 1.4, 2.0)
    assert card["length_penalty"] == decoding["length_penalty"] and card["beam_size"] == 2
    assert set(card["bleu"]) == {"test2016", "test2017", "mscoco2017"}


def test_evaluate_tunes_the_coverage_penalty_and_reports_bleu_with_and_without(
    trained: Path, corpus: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(trained, tmp_path / "model")
    args = ["evaluate", str(folder), "--data-dir", str(corpus), "--beam", "2", "--splits", "test2016"]
    assert main([*args, "--tune-length-penalty", "--update-card"]) == 0
    length_penalty = json.loads((folder / "card.json").read_text())["decoding"]["length_penalty"]
    assert main([*args, "--tune-coverage-penalty", "--update-card"]) == 0
    card = json.loads((folder / "card.json").read_text())
    decoding = card["decoding"]
    assert decoding["coverage_penalty"] in (0.0, 0.05, 0.1, 0.2, 0.4)
    assert decoding["length_penalty"] == length_penalty  # tuned before, kept
    assert card["coverage_penalty"] == decoding["coverage_penalty"]
    experiment = card["coverage_experiment"]
    assert set(experiment["val_bleu_lowercase_by_coverage_penalty"]) == {"0.0", "0.05", "0.1", "0.2", "0.4"}
    row = experiment["bleu_lowercase"]["test2016"]
    assert row["with"] == card["bleu"]["test2016"]["lowercase_13a"]
    assert set(experiment["bleu_lowercase_21+_words"]["test2016"]) == {"with", "without"}
    # the tuned beta is what the folder now decodes with
    assert Translator(load_model_folder(folder)).coverage_penalty == decoding["coverage_penalty"]


def test_coverage_tuning_needs_cross_attention(
    tiny_models_dir: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tiny_models_dir / "en-de-rnn-none"
    assert main(["evaluate", str(folder), "--data-dir", str(corpus), "--tune-coverage-penalty"]) == 2
    assert_clean_error(capsys, "evaluate", "en-de-rnn-none has no cross-attention")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--splits", "dev"], "unknown split 'dev'"),
        (["--data-dir", "/nonexistent/multi30k"], "/nonexistent/multi30k does not exist"),
    ],
)
def test_evaluate_mistakes_are_clear_errors(
    trained: Path, corpus: Path, capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    assert main(["evaluate", str(trained), "--data-dir", str(corpus), *args]) == 2
    assert_clean_error(capsys, "evaluate", problem)


def test_evaluate_a_folder_that_is_not_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evaluate", str(tmp_path)]) == 2
    assert_clean_error(capsys, "evaluate", "missing config.json")


def test_download_from_an_unreachable_server_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a local port nothing listens on: never the internet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(data, "DOWNLOAD_URL", f"http://127.0.0.1:{port}/{{file}}")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert main(["download", "--data-dir", str(tmp_path / "multi30k")]) == 2
    assert_clean_error(capsys, "download", "could not download")
    assert list((tmp_path / "multi30k").iterdir()) == []


def test_set_overrides_training_recipe_and_transformer_dropouts(corpus: Path, tmp_path: Path) -> None:
    args = train_args(
        corpus,
        tmp_path,
        "--set",
        "label_smoothing=0.2",
        "--set",
        "attention_dropout=0.05",
        "--set",
        "activation_dropout=0",
        "--no-test-eval",
    )
    assert main(args) == 0
    loaded = load_model_folder(tmp_path / "model")
    assert (loaded.config.attention_dropout, loaded.config.activation_dropout) == (0.05, 0.0)
    assert loaded.card["hyperparameters"]["training"]["label_smoothing"] == 0.2
