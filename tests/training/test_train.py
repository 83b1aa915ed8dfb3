"""Two-step training runs of every architecture on a tiny corpus: the finished model folder
(fp16 weights, tokenizer, card with curve, test BLEU and BLEU by length) loads and translates;
an interrupted run resumes where it stopped."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

from attnscope.nn.config import EOS_ID, ModelConfig, TransformerConfig
from attnscope.repository import load_model_folder
from attnscope.testing import tiny_config
from attnscope.training.data import TEST_SPLITS
from attnscope.training.evaluate import LENGTH_BUCKETS, bucket_name
from attnscope.training.presets import TrainConfig
from attnscope.training.train import TrainRun, train
from attnscope.translator import Translator

RUNS = [
    ("transformer", "additive"),
    ("rnn", "additive"),
    ("rnn", "general"),
    ("rnn", "location"),
    ("rnn", "none"),
    ("self_attentive_rnn", "additive"),
]
# 64 padded tokens a batch: the 10 training pairs make several batches, so 2 steps is 1 epoch.
FAST = TrainConfig(
    vocab_size=120, batch_tokens=64, warmup_steps=2, max_epochs=3, average_last=0, eval_beam=2
)


def model_config(architecture: str, score: str) -> ModelConfig:
    """Tiny dimensions, one layer; ``train`` sets the vocabulary size from its tokenizer."""
    config = tiny_config(architecture, score, 8000)
    if isinstance(config, TransformerConfig):
        return dataclasses.replace(config, encoder_layers=1, decoder_layers=1)
    return config


def run(
    corpus: Path,
    root: Path,
    config: TrainConfig,
    *,
    architecture: str = "rnn",
    score: str = "additive",
    resume: bool = False,
    evaluate_test: bool = True,
) -> dict[str, Any]:
    return train(
        model_config(architecture, score),
        config,
        TrainRun(
            data_dir=corpus,
            out_dir=root / "model",
            run_dir=root / "run",
            resume=resume,
            evaluate_test=evaluate_test,
            progress=False,
        ),
    )


def weight_dtypes(path: Path) -> set[str]:
    with safe_open(str(path), framework="pt") as f:
        return {f.get_slice(key).get_dtype() for key in f.keys()}


@pytest.mark.parametrize(("architecture", "score"), RUNS)
def test_two_steps_write_a_model_folder_that_loads_and_translates(
    tiny_corpus: Path, tmp_path: Path, architecture: str, score: str
) -> None:
    card = run(
        tiny_corpus,
        tmp_path,
        dataclasses.replace(FAST, max_steps=2),
        architecture=architecture,
        score=score,
    )
    folder = tmp_path / "model"

    assert sorted(p.name for p in folder.iterdir()) == [
        "card.json",
        "complete.json",  # the completion marker (attnscope.staging): written last, trusted by loaders
        "config.json",
        "model.safetensors",
        "tokenizer.model",
    ]
    assert weight_dtypes(folder / "model.safetensors") == {"F16"}
    assert json.loads((folder / "card.json").read_text()) == card
    assert card["architecture"] == architecture
    assert card["score"] == (None if architecture == "transformer" else score)
    assert card["training"]["steps"] == 2 and card["training"]["epochs"] == 1
    assert card["training"]["stopped_by_time_budget"] is True
    assert [(p["epoch"], p["step"]) for p in card["curve"]] == [(1, 2)]
    assert {"train_loss", "val_loss", "val_bleu", "lr", "time_s"} <= set(card["curve"][0])
    assert card["beam_size"] == FAST.eval_beam
    assert set(card["bleu"]) == set(TEST_SPLITS) == set(card["bleu_by_length"])
    for split in TEST_SPLITS:
        bleu = card["bleu"][split]
        assert 0 <= bleu["cased"] <= 100 and 0 <= bleu["lowercase_13a"] <= 100
        assert "case:mixed" in bleu["signature_cased"] and "case:lc" in bleu["signature_lowercase"]
        rows = card["bleu_by_length"][split]
        assert [r["bucket"] for r in rows] == [bucket_name(lo, hi) for lo, hi in LENGTH_BUCKETS]
    # test2016 (see conftest): four captions of 3-8 words, one of 12, one of 22.
    assert [r["sentences"] for r in card["bleu_by_length"]["test2016"]] == [4, 1, 0, 0, 1]

    loaded = load_model_folder(folder)
    assert loaded.config == dataclasses.replace(
        model_config(architecture, score), vocab_size=loaded.tokenizer.vocab_size
    )
    assert loaded.card == card and (loaded.source_lang, loaded.target_lang) == ("en", "de")
    [translation] = Translator(loaded).translate(
        ["A man is riding a bicycle."], beam_size=2, max_length=12
    )
    assert translation.source_ids[-1] == EOS_ID
    assert 1 <= len(translation.target_ids) <= 12
    assert translation.text == loaded.tokenizer.decode(translation.target_ids)


def test_resume_continues_the_curve_and_the_step_count(tiny_corpus: Path, tmp_path: Path) -> None:
    one_epoch = dataclasses.replace(FAST, max_epochs=1)
    first = run(tiny_corpus, tmp_path / "a", one_epoch, evaluate_test=False)
    tok_file = tmp_path / "a" / "run" / "tokenizer.model"
    written = tok_file.stat()
    resumed = run(
        tiny_corpus,
        tmp_path / "a",
        dataclasses.replace(FAST, max_epochs=2),
        resume=True,
        evaluate_test=False,
    )
    straight = run(
        tiny_corpus, tmp_path / "b", dataclasses.replace(FAST, max_epochs=2), evaluate_test=False
    )

    # The run's tokenizer is read, never rewritten: under torchrun the other ranks read it meanwhile.
    assert (tok_file.stat().st_ino, tok_file.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    steps = first["training"]["steps"]
    assert steps > 1 and [p["step"] for p in first["curve"]] == [steps]
    assert [(p["epoch"], p["step"]) for p in resumed["curve"]] == [(1, steps), (2, 2 * steps)]
    assert resumed["training"]["epochs"] == 2 and resumed["training"]["steps"] == 2 * steps
    assert resumed["curve"][0] == first["curve"][0]  # the first epoch is kept, not trained again

    # Weights, optimiser and schedule all came back: epoch 2 is what an uninterrupted run gives.
    def without_time(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in p.items() if k != "time_s"} for p in curve]

    assert without_time(resumed["curve"]) == without_time(straight["curve"])
