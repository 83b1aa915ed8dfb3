"""Activation patching (attnscope.inside.patching): identical sources change nothing, a grid entry
is the single-head patched run, patching every head of a layer is the model's own pass with that
attention's output taken from the corrupted run (forward hooks on the model's modules), and in a
hand-built model where one head copies one source token, only that head (and that position) shows."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnscope.decoding.output import DecodeStopped
from attnscope.inside import trace as tracing
from attnscope.inside.patching import patch, patched_logits
from attnscope.nn.transformer import Transformer
from tests.inside.tiny_layouts import LAYOUTS, tiny

CLEAN = [5, 9, 11, 17, 3]
CORRUPTED = [5, 9, 12, 17, 3]
TARGET = [7, 21, 8, 3]


def log_p(logits: Tensor, target: list[int]) -> Tensor:
    """(B, T, V) -> (B,) the summed log-probability of ``target``."""
    lp = torch.log_softmax(logits, -1)
    return lp[:, torch.arange(len(target)), torch.tensor(target)].sum(-1)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_identical_sources_change_nothing(layout: str) -> None:
    grids = patch(tiny(layout), CLEAN, CLEAN, TARGET)
    assert grids.heads["self"].abs().max() == 0 and grids.heads["cross"].abs().max() == 0
    assert grids.positions.abs().max() == 0
    assert grids.positions.shape == (3, len(CLEAN)) and grids.heads["cross"].shape == (2, 2)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_grid_entry_is_that_single_head_patched(layout: str) -> None:
    model = tiny(layout)
    grids = patch(model, CLEAN, CORRUPTED, TARGET)
    src, bad, tgt = torch.tensor([CLEAN]), torch.tensor([CORRUPTED]), torch.tensor([TARGET])
    with torch.no_grad():
        _, donor = tracing.run(model, bad, tgt)
        clean = log_p(patched_logits(model, src, tgt, lambda i, k, h: h), TARGET)
    for kind in ("self", "cross"):
        for layer in range(2):
            for head in range(2):
                def edit(i: int, k: str, heads: Tensor, layer: int = layer, head: int = head, kind: str = kind) -> Tensor:
                    if (i, k) != (layer, kind):
                        return heads
                    heads = heads.clone()
                    heads[:, :, head] = donor.heads[(layer, kind)][:, :, head]
                    return heads

                alone = log_p(patched_logits(model, src, tgt, edit), TARGET) - clean
                assert abs(float(alone) - float(grids.heads[kind][layer, head])) < 1e-4


@pytest.mark.parametrize("kind", ["self", "cross"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_head_of_a_layer_is_that_layers_attention_output_from_the_corrupted_run(layout: str, kind: str) -> None:
    model = tiny(layout)
    src, bad, tgt = torch.tensor([CLEAN]), torch.tensor([CORRUPTED]), torch.tensor([TARGET])
    tgt_in = tracing.target_input(model, tgt)
    proj: nn.Linear = getattr(model.decoder_layers[1], f"{kind}_attn").out_proj
    seen: list[Tensor] = []
    # the model's own forward pass, with gradients on so that every linear layer is a module call
    handle = proj.register_forward_hook(lambda m, i, out: seen.append(out.detach()))
    model(bad, tgt_in)
    handle.remove()
    handle = proj.register_forward_hook(lambda m, i, out: seen[0])
    expected = torch.log_softmax(model(src, tgt_in).logits, -1).detach()
    handle.remove()
    with torch.no_grad():
        _, donor = tracing.run(model, bad, tgt)
        _, own = tracing.run(model, src, tgt)
    assert (donor.heads[(1, kind)] - own.heads[(1, kind)]).abs().max() > 1e-3  # a real replacement

    def edit(i: int, k: str, heads: Tensor) -> Tensor:
        return donor.heads[(1, kind)] if (i, k) == (1, kind) else heads

    got = torch.log_softmax(patched_logits(model, src, tgt, edit), -1)
    assert (got - expected).abs().max() < 1e-4


SWAPPED = 2  # the source position where CLEAN and CORRUPTED differ (token 11 vs 12)


def copying_model() -> Transformer:
    """A tiny model whose decoder reads the source through one head only, and that head copies one
    source token: cross-attention head 1 of layer 0 attends to the source position holding a
    "marked" token (11 or 12, both marked: the swapped position in either run) and writes that
    position's memory (its dims dh..d) into the residual stream. The encoder's sublayers write
    nothing (the memory at a position is its own embedding, normed), and every other head's output
    projection, every feed-forward output and every attention output bias is zero."""
    model = tiny("shipped", seed=3)
    with torch.no_grad():
        for layer in model.decoder_layers:
            for attn in (layer.self_attn, layer.cross_attn):
                attn.out_proj.weight.zero_()
                attn.out_proj.bias.zero_()
            layer.ff.net[-1].weight.zero_()
            layer.ff.net[-1].bias.zero_()
        for layer in model.encoder_layers:  # the memory at position j: only token j and position j
            layer.self_attn.out_proj.weight.zero_()
            layer.self_attn.out_proj.bias.zero_()
            layer.ff.net[-1].weight.zero_()
            layer.ff.net[-1].bias.zero_()
        model.embed.weight[[11, 12], 0] = 5.0  # the mark: a large dimension 0
        model.encoder_norm.weight[0], model.encoder_norm.bias[0] = 1.0, 0.0
        ca = model.decoder_layers[0].cross_attn
        d, dh = model.config.d_model, ca.head_dim
        ca.q_proj.weight[dh:].zero_()  # head 1's query: a constant that asks for the mark...
        ca.q_proj.bias[dh:].zero_()
        ca.q_proj.bias[dh] = 40.0
        ca.k_proj.weight[dh:].zero_()  # ...which its keys read from the memory's dimension 0
        ca.k_proj.bias[dh:].zero_()
        ca.k_proj.weight[dh, 0] = 1.0
        ca.v_proj.weight[dh:].copy_(torch.eye(d)[dh:] * 3)  # head 1's values: the memory's dims dh..d
        ca.v_proj.bias[dh:].zero_()
        ca.out_proj.weight[dh:, dh:].copy_(torch.eye(dh))  # written back where they came from
    return model


def test_only_the_copying_head_shows_in_the_grid() -> None:
    model = copying_model()
    tgt_in = tracing.target_input(model, torch.tensor([TARGET]))
    for source in (CLEAN, CORRUPTED):  # the head copies the swapped token in both runs
        with torch.no_grad():
            cross = model(torch.tensor([source]), tgt_in, need_weights=True).cross  # (1, L, H, T, S)
        assert cross is not None and bool((cross[0, 0, 1, :, SWAPPED] > 0.99).all())
    grids = patch(model, CLEAN, CORRUPTED, TARGET)
    cross = grids.heads["cross"]
    assert abs(float(cross[0, 1])) > 1e-2
    others = [float(cross[i, j]) for i in range(2) for j in range(2) if (i, j) != (0, 1)]
    assert others == [0.0, 0.0, 0.0]
    assert grids.heads["self"].abs().max() == 0
    assert abs(float((grids.corrupted - grids.clean).sum() - cross[0, 1])) < 1e-4  # that head is the whole effect
    for row in grids.positions:  # every encoder row: the swapped position only (the encoder mixes nothing)
        assert abs(float(row[SWAPPED])) > 1e-2 and row[[0, 1, 3, 4]].abs().max() == 0


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="5 tokens and the corrupted one 4"):
        patch(tiny("shipped"), CLEAN, CLEAN[:4], TARGET)
    with pytest.raises(ValueError, match="position 9"):
        patch(tiny("shipped"), CLEAN, CLEAN, TARGET, position=9)


def test_one_position_is_that_positions_change() -> None:
    model = tiny("shipped")
    every = [patch(model, CLEAN, CORRUPTED, TARGET, position=t).heads["cross"] for t in range(len(TARGET))]
    assert torch.allclose(sum(every), patch(model, CLEAN, CORRUPTED, TARGET).heads["cross"], atol=1e-4)


def test_a_stop_request_ends_the_run_between_batches() -> None:
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(DecodeStopped):
        patch(tiny("shipped"), CLEAN, CORRUPTED, TARGET, should_stop=stop)
    assert len(asked) == 3
