"""Training under ``torchrun`` with DistributedDataParallel: two CPU processes on gloo, each on
its shard of every token batch, give the same losses as one process on the whole batches (the
two-process run is even interrupted after its first epoch and resumed), and only rank 0 writes
the model folder, the card and the checkpoint.

Tolerance: 1e-4 absolute on losses of about 4-5 nats. The two runs differ only in the order of
floating-point sums (each shard is padded to its own length; DDP sums two half-batch gradients),
about 1e-6 after a few Adam steps; a real mismatch (a shard trained twice, a wrong normalisation,
an unsynchronised step) moves the loss by 1e-2 or more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnscope.cli import main
from attnscope.testing import REPO_ROOT, tiny_tokenizer

TOLERANCE = 1e-4


def train_args(corpus: Path, tokenizer: Path, root: Path, epochs: int = 2) -> list[str]:
    return [
        "train", "--preset", "tiny", "--data-dir", str(corpus), "--tokenizer", str(tokenizer),
        "--out", str(root / "model"), "--run-dir", str(root / "run"), "--batch-tokens", "64",
        "--epochs", str(epochs), "--device", "cpu", "--no-test-eval", "--quiet",
    ]  # fmt: skip


def torchrun(args: list[str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "attnscope.cli", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return run


def test_two_gloo_processes_match_one_process(tiny_corpus: Path, tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer.model"
    tiny_tokenizer().save(tokenizer)
    assert main(train_args(tiny_corpus, tokenizer, tmp_path / "one")) == 0
    torchrun(train_args(tiny_corpus, tokenizer, tmp_path / "two", epochs=1))  # then "interrupted"
    run = torchrun([*train_args(tiny_corpus, tokenizer, tmp_path / "two"), "--resume"])

    one = json.loads((tmp_path / "one" / "model" / "card.json").read_text())
    two = json.loads((tmp_path / "two" / "model" / "card.json").read_text())
    assert (one["training"]["processes"], two["training"]["processes"]) == (1, 2)
    assert one["training"]["steps"] == two["training"]["steps"] >= 6  # no batch lost to sharding
    assert len(one["curve"]) == len(two["curve"]) == 2  # two epochs: validated, state shared, again
    for a, b in zip(one["curve"], two["curve"], strict=True):
        assert a["step"] == b["step"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=TOLERANCE)
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=TOLERANCE)
    assert one["curve"][-1]["train_loss"] < one["curve"][0]["train_loss"] + 1.0  # it trained, sanely
    # Rank 0 alone wrote the run's files; rank 1 logged nothing at INFO level.
    assert sorted(p.name for p in (tmp_path / "two" / "run").iterdir()) == ["checkpoint.pt", "tokenizer.model"]
    assert run.stderr.count("resumed from") == 1 and "epoch 2: train loss" in run.stderr
