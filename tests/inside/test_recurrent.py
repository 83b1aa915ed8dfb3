"""Context-vector patching of RNN encoder–decoders (attnscope.inside.recurrent): identical sources
change nothing, and each patched step equals the model's own forward pass with that step's context
replaced by hand (forward pre-hooks on its GRU cell and output layer, the donor context read the
same way from the corrupted run), for sources of different lengths too."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from attnscope.inside.recurrent import patch_context
from attnscope.nn.factory import build_model
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.testing import tiny_config

CLEAN = [5, 9, 11, 17, 3]
CORRUPTED = [5, 9, 12, 17, 21, 3]  # one word changed, one added: a context has no length
TARGET = [7, 21, 8, 3]


def tiny_rnn(architecture: str, score: str) -> RNNSeq2Seq:
    torch.manual_seed(0)
    model = build_model(tiny_config(architecture, score, 40)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    assert isinstance(model, RNNSeq2Seq)
    return model


def _by_hand(model: RNNSeq2Seq, source: list[int], swap: tuple[int, Tensor] | None) -> tuple[Tensor, list[Tensor]]:
    """The model's own forward on TARGET: log p per token (T,) and the context of each step (read
    from the GRU cell's input); ``swap`` (step, context) replaces that step's context where the
    cell and the output layer read it."""
    e, h, seen, calls = model.config.emb_dim, model.config.hidden_dim, [], {"cell": 0, "out": 0}

    def cell(module: Any, args: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
        step, calls["cell"] = calls["cell"], calls["cell"] + 1
        seen.append(args[0][0, e:].clone())
        if swap is None or step != swap[0]:
            return None
        x = args[0].clone()
        x[0, e:] = swap[1]
        return (x, *args[1:])

    def output_input(module: Any, args: tuple[Tensor, ...], out: Tensor) -> Tensor | None:
        """The model's dropout (identity in eval) on [s_t; c_t; y_t-1], what its output layer reads."""
        if out.size(-1) != 2 * h + e:
            return None
        step, calls["out"] = calls["out"], calls["out"] + 1
        if swap is None or step != swap[0]:
            return None
        out = out.clone()
        out[0, h : 2 * h] = swap[1]
        return out

    hooks = [model.cell.register_forward_pre_hook(cell), model.dropout.register_forward_hook(output_input)]
    tgt = torch.tensor([TARGET])
    tgt_in = torch.cat([torch.tensor([[model.config.bos_id]]), tgt[:, :-1]], 1)
    with torch.no_grad():
        logits = model(torch.tensor([source]), tgt_in).logits
    for h in hooks:
        h.remove()
    return torch.log_softmax(logits[0].float(), -1).gather(-1, tgt[0][:, None])[:, 0], seen


@pytest.mark.parametrize(("architecture", "score"), [("rnn", "additive"), ("rnn", "none"), ("self_attentive_rnn", "dot")])
def test_a_patched_step_is_the_run_with_that_context_replaced_by_hand(architecture: str, score: str) -> None:
    model = tiny_rnn(architecture, score)
    same = patch_context(model, CLEAN, CLEAN, TARGET)
    assert same.grid.abs().max() == 0 and same.steps.shape == (len(TARGET),)
    result = patch_context(model, CLEAN, CORRUPTED, TARGET)
    clean, _ = _by_hand(model, CLEAN, None)
    corrupted, donors = _by_hand(model, CORRUPTED, None)
    assert torch.allclose(result.clean, clean, atol=1e-5) and torch.allclose(result.corrupted, corrupted, atol=1e-5)
    for step in range(len(TARGET)):
        patched, _ = _by_hand(model, CLEAN, (step, donors[step]))
        assert torch.allclose(result.grid[step], patched - clean, atol=1e-5), f"step {step}"
        assert result.grid[step, :step].abs().sum() == 0  # earlier tokens cannot move
    assert result.grid.abs().max() > 1e-3  # the sources differ, so some context matters
    assert torch.allclose(result.steps, result.grid.sum(-1))
    at = patch_context(model, CLEAN, CORRUPTED, TARGET, position=2)
    assert torch.allclose(at.steps, result.grid[:, 2])
