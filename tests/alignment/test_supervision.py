"""Alignment-supervised training (Garg et al. 2019): reference distributions over pieces, the
supervised head's loss falls, and `train` fine-tunes a model folder with the extra loss term."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnscope.alignment.corpus import AlignedPair
from attnscope.alignment.links import parse_pharaoh
from attnscope.alignment.rows import Rows
from attnscope.alignment.words import word_spans
from attnscope.nn.factory import build_model
from attnscope.repository import WEIGHTS_FILE
from attnscope.testing import TINY_PAIRS, build_tiny_models, tiny_config, tiny_tokenizer
from attnscope.training.data import collate
from attnscope.training.presets import TrainConfig
from attnscope.training.supervision import (
    HeadSupervision,
    alignment_targets,
    encode_aligned,
    head_alignment_loss,
    piece_links,
)
from attnscope.training.train import TrainRun, train

from .conftest import diagonal_references


def test_piece_links_spread_over_the_linked_words_pieces() -> None:
    tok = tiny_tokenizer()
    src, tgt = "A man is riding a bicycle.", "Ein Mann fährt Fahrrad."
    ref = AlignedPair(parse_pharaoh("0-0 1-1 2-2 3-2 5-3 6-4"), word_spans(src, "en"), word_spans(tgt, "de"))
    s, t = tok.encode(src), tok.encode(tgt)
    links = piece_links(tok, src, tgt, s, t, ref)
    rows: dict[int, float] = {}
    for row, _, weight in links:
        rows[row] = rows.get(row, 0.0) + weight
    assert all(abs(total - 1.0) < 1e-9 for total in rows.values())
    assert set(rows) == set(range(len(t)))  # every target word is linked here
    # "fährt" (target word 2) is linked to "is" and "riding": its pieces spread over both words' pieces
    src_pieces, tgt_pieces = tok.pieces(s), tok.pieces(t)
    faehrt_row = next(k for k, p in enumerate(tgt_pieces) if p.startswith("▁f"))
    targets = {tok.pieces([s[col]])[0] for row, col, _ in links if row == faehrt_row}
    is_riding = {p for p in src_pieces if p in ("▁is",) or "rid" in p or p.startswith("▁r")}
    assert targets and targets <= set(src_pieces) and targets & is_riding


def test_reads_targets_are_the_produces_targets_one_step_later() -> None:
    tok = tiny_tokenizer()
    examples = encode_aligned(TINY_PAIRS, diagonal_references(TINY_PAIRS), tok, max_tokens=100)
    src, _, gold = collate(examples, "cpu")
    produces = alignment_targets(examples, gold.size(1), src.size(1), "cpu")
    reads = alignment_targets(examples, gold.size(1), src.size(1), "cpu", "reads")
    assert torch.equal(reads[:, 1:], produces[:, :-1])
    assert reads[:, 0].sum() == 0  # the step reading <s> aligns nothing
    assert produces[:, -1].sum() == 0  # nothing was lost at the end: the last row is </s>'s


def head_losses(supervised: bool, steps: int = 30, rows: Rows = "produces") -> list[float]:
    """The loss of head L1H0 while training a tiny Transformer with or without the term."""
    torch.manual_seed(0)
    tok = tiny_tokenizer()
    model = build_model(tiny_config("transformer", "additive", tok.vocab_size)).train()
    examples = encode_aligned(TINY_PAIRS, diagonal_references(TINY_PAIRS), tok, max_tokens=100)
    src, tgt_in, gold = collate(examples, "cpu")
    targets = alignment_targets(examples, gold.size(1), src.size(1), "cpu", rows)
    assert targets.sum() > 0
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        out = model(src, tgt_in, need_weights=True)
        assert out.cross is not None
        loss = head_alignment_loss(out.cross[:, 1, 0], targets)
        losses.append(loss.item())
        ce = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), gold.flatten(), ignore_index=0)
        opt.zero_grad()
        (ce + loss if supervised else ce).backward()
        opt.step()
    return losses


@pytest.mark.parametrize("rows", ["produces", "reads"])
def test_supervised_head_loss_decreases(rows: Rows) -> None:
    supervised, unsupervised = head_losses(True, rows=rows), head_losses(False, rows=rows)
    assert supervised[0] == pytest.approx(unsupervised[0])  # same start
    assert supervised[-1] < 0.5 * supervised[0]
    assert supervised[-1] < 0.5 * unsupervised[-1]  # the term, not translation training, does it


def test_head_alignment_loss_is_zero_for_a_perfect_head_and_ignores_unsupervised_rows() -> None:
    targets = torch.zeros(1, 3, 4)
    targets[0, 0, 1] = 1.0
    targets[0, 1, 2] = 1.0  # row 2 is not supervised
    perfect = torch.full((1, 3, 4), 0.0)
    perfect[0, 0, 1] = perfect[0, 1, 2] = 1.0
    perfect[0, 2] = 0.25
    assert head_alignment_loss(perfect, targets).item() == pytest.approx(0.0, abs=1e-6)
    uniform = torch.full((1, 3, 4), 0.25)
    assert head_alignment_loss(uniform, targets).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())


def test_supervision_rejects_a_missing_head() -> None:
    config = tiny_config("transformer", "additive", 100)  # 2 layers x 2 heads
    with pytest.raises(ValueError, match="L2H0"):
        HeadSupervision(2, 0).check(config)
    with pytest.raises(ValueError, match="Transformer"):
        HeadSupervision(0, 0).check(tiny_config("rnn", "additive", 100))


FAST = TrainConfig(vocab_size=120, batch_tokens=64, warmup_steps=2, max_epochs=3, average_last=0, lr=3e-3)


def test_train_fine_tunes_a_folder_with_a_supervised_head(aligned_corpus: Path, tmp_path: Path) -> None:
    init = next(p for p in build_tiny_models(tmp_path / "init") if p.name.endswith("transformer"))
    config = tiny_config("transformer", "additive", 120)
    from attnscope.repository import read_config

    config = read_config(init)[0]
    supervision = HeadSupervision(1, 0, weight=1.0, align_dir=str(aligned_corpus / "alignments"))
    common = dict(data_dir=aligned_corpus, tokenizer_path=init / "tokenizer.model", init_from=init,
                  supervision=supervision, evaluate_test=False, progress=False)
    card = train(config, FAST, TrainRun(out_dir=tmp_path / "aligned", run_dir=tmp_path / "run", **common))  # type: ignore[arg-type]
    curve = card["curve"]
    assert [c["epoch"] for c in curve] == [1, 2, 3]
    assert curve[-1]["train_align_loss"] < curve[0]["train_align_loss"]
    assert all(0.0 <= c["val_align_f1"] <= 1.0 for c in curve)
    assert card["training"]["init_from"] == str(init)
    assert card["training"]["alignment_supervision"]["layer"] == 1
    # With a zero learning rate the written weights are the folder's own: the run started from them.
    frozen = dataclasses.replace(FAST, lr=0.0, max_epochs=1)
    train(config, frozen, TrainRun(out_dir=tmp_path / "same", run_dir=tmp_path / "run0", **common))  # type: ignore[arg-type]
    before, after = load_file(str(init / WEIGHTS_FILE)), load_file(str(tmp_path / "same" / WEIGHTS_FILE))
    assert all(torch.equal(before[k].half(), after[k]) for k in before)


@pytest.mark.parametrize("weight_decay", [0.0, 0.5], ids=["no-decay", "decay"])
def test_only_head_training_changes_that_heads_query_and_key_rows_and_nothing_else(
    aligned_corpus: Path, tmp_path: Path, weight_decay: float
) -> None:
    init = next(p for p in build_tiny_models(tmp_path / "init") if p.name.endswith("transformer"))
    from attnscope.repository import read_config

    supervision = HeadSupervision(1, 1, weight=1.0, align_dir=str(aligned_corpus / "alignments"), only_head=True)
    # AdamW's decoupled weight decay shrinks every parameter it holds, gradient or not: the
    # other heads' rows must not be in it
    fast = dataclasses.replace(FAST, max_epochs=2, weight_decay=weight_decay)
    card = train(read_config(init)[0], fast, TrainRun(out_dir=tmp_path / "aligned",
                 run_dir=tmp_path / "run", data_dir=aligned_corpus, tokenizer_path=init / "tokenizer.model",
                 init_from=init, supervision=supervision, evaluate_test=False, progress=False))
    assert card["training"]["alignment_supervision"]["only_head"] is True
    before = {k: v.half() for k, v in load_file(str(init / WEIGHTS_FILE)).items()}  # the folder keeps fp16
    after = load_file(str(tmp_path / "aligned" / WEIGHTS_FILE))
    head_dim = before["decoder_layers.1.cross_attn.q_proj.weight"].size(0) // 2  # 2 heads
    rows = slice(head_dim, 2 * head_dim)  # head 1
    changed = []
    for name in before:
        if torch.equal(before[name], after[name]):
            continue
        changed.append(name)
        outside = torch.ones(before[name].size(0), dtype=torch.bool)
        outside[rows] = False
        assert torch.equal(before[name][outside], after[name][outside]), name  # head 0's rows kept
    assert changed and set(changed) <= {
        f"decoder_layers.1.cross_attn.{proj}.{part}" for proj in ("q_proj", "k_proj") for part in ("weight", "bias")
    }


def test_supervised_head_trains_with_rdrop(aligned_corpus: Path, tmp_path: Path) -> None:
    """R-Drop doubles each batch; the head's targets are doubled with it (both passes supervised).
    Here the head is trained on the rows that read each word, which the card records."""
    init = next(p for p in build_tiny_models(tmp_path / "init") if p.name.endswith("transformer"))
    from attnscope.repository import read_config

    supervision = HeadSupervision(1, 0, weight=1.0, align_dir=str(aligned_corpus / "alignments"), rows="reads")
    card = train(read_config(init)[0], dataclasses.replace(FAST, rdrop_alpha=2.0), TrainRun(out_dir=tmp_path / "aligned",
                 run_dir=tmp_path / "run", data_dir=aligned_corpus, tokenizer_path=init / "tokenizer.model",
                 init_from=init, supervision=supervision, evaluate_test=False, progress=False))
    curve = card["curve"]
    assert curve[-1]["train_align_loss"] < curve[0]["train_align_loss"]
    assert card["training"]["alignment_supervision"]["rows"] == "reads"
