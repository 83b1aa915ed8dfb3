"""The logit lens and direct logit attribution (attnscope.inside.lens) on tiny random models of
each Transformer layout: the lens's last point is the model's own output, the attribution's parts
add up to the logit, and a model without a residual stream is refused with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnscope.inside import trace as tracing
from attnscope.inside.lens import inspect, total
from attnscope.inside.trace import NotApplicable
from attnscope.nn import layers
from attnscope.nn.factory import build_model
from attnscope.repository import load_model_folder
from attnscope.testing import tiny_config
from attnscope.translator import Translator
from tests.inside.tiny_layouts import LAYOUTS, tiny

SOURCE = [5, 9, 11, 17, 3]
TARGET = [7, 21, 8, 3]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_last_point_of_the_lens_is_the_models_output(layout: str) -> None:
    model = tiny(layout)
    found, _ = inspect(model, SOURCE, TARGET, k=3)
    src, tgt = torch.tensor([SOURCE]), torch.tensor([TARGET])
    with torch.no_grad():  # the model's own forward pass, not the traced one
        own = torch.log_softmax(model(src, tracing.target_input(model, tgt)).logits[0], dim=-1)
    assert (found.log_probs - own).abs().max() < 1e-5
    points = 1 + 3 * LAYOUTS[layout].decoder_layers
    assert found.labels[0] == "embed" and found.labels[-1] == "2.ff" and len(found.labels) == points
    assert found.top_ids.shape == (points, len(TARGET), 3) and found.rank.shape == (points, len(TARGET))
    written = own.gather(-1, tgt[0][:, None])[:, 0]
    assert torch.allclose(found.prob[-1].log(), written, atol=1e-5)
    assert found.rank[-1].tolist() == (own > written[:, None]).sum(-1).tolist()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_emergence_is_the_first_point_of_an_unbroken_run_of_top_1(layout: str) -> None:
    model = tiny(layout)
    target = tiny_greedy(model)  # a greedy output: every word is top-1 at the last point
    found, _ = inspect(model, SOURCE, target)
    for t, start in enumerate(found.emergence):
        assert start is not None
        assert (found.rank[start:, t] == 0).all()
        assert start == 0 or found.rank[start - 1, t] > 0


def tiny_greedy(model: torch.nn.Module, length: int = 4) -> list[int]:
    """The argmax word at each position, given the ones before (teacher-forced greedy)."""
    target: list[int] = []
    with torch.no_grad():
        for _ in range(length):
            tgt = torch.tensor([target + [3]])
            logits = model(torch.tensor([SOURCE]), tracing.target_input(model, tgt)).logits  # type: ignore[arg-type]
            target.append(int(logits[0, -1].argmax()))
    return target


@pytest.mark.parametrize("layout", ["shipped", "t5"])
def test_direct_attributions_add_up_to_the_logit(layout: str) -> None:
    model = tiny(layout)
    _, dla = inspect(model, SOURCE, TARGET)
    assert dla is not None
    src, tgt = torch.tensor([SOURCE]), torch.tensor([TARGET])
    with torch.no_grad():
        own = model(src, tracing.target_input(model, tgt)).logits[0].gather(-1, tgt[0][:, None])[:, 0]
    assert (dla.logit - own).abs().max() < 1e-5
    assert (total(dla) - own).abs().max() < 1e-4
    assert dla.heads["cross"].shape == (2, 2, len(TARGET)) and dla.feed_forward.shape == (2, len(TARGET))
    assert dla.heads["cross"].abs().sum() > 0 and dla.heads["self"].abs().sum() > 0


def test_a_heads_attribution_is_its_output_on_the_frozen_norms_direction() -> None:
    """Independently of the einsum: the head's output through W_O, centred, over the clean σ,
    times γ, dotted with the written word's embedding."""
    model = tiny("shipped")
    src, tgt = torch.tensor([SOURCE]), torch.tensor([TARGET])
    with torch.no_grad():
        _, trace = tracing.run(model, src, tgt)
        _, dla = inspect(model, SOURCE, TARGET)
        proj, norm = model.decoder_layers[1].cross_attn.out_proj, model.decoder_norm
        heads = trace.heads[(1, "cross")][0].clone()  # (T, H, Dh)
        heads[:, 0] = 0  # head 1 alone, without the bias
        written = heads.flatten(1) @ proj.weight.T  # (T, D)
        final = trace.points[-1][0]
        sigma = (final.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        normed = (written - written.mean(-1, keepdim=True)) / sigma * norm.weight
        expected = (normed * model.embed.weight[tgt[0]]).sum(-1)
    assert dla is not None and torch.allclose(dla.heads["cross"][1, 1], expected, atol=1e-5)


def test_post_norm_attributions_add_up_through_the_frozen_norms() -> None:
    """BART's layout renormalises after every sublayer: with each norm's σ frozen the parts (the
    norms' β among them) add up to the model's own logit."""
    model = tiny("bart")
    found, dla = inspect(model, SOURCE, TARGET)
    src, tgt = torch.tensor([SOURCE]), torch.tensor([TARGET])
    with torch.no_grad():
        own = model(src, tracing.target_input(model, tgt)).logits[0].gather(-1, tgt[0][:, None])[:, 0]
    assert len(found.labels) == 7 and dla is not None and "post-norm" in dla.norm
    assert dla.norm_bias is not None and dla.norm_bias.shape == (2, len(TARGET)) and dla.norm_bias.abs().sum() > 0
    assert (dla.logit - own).abs().max() < 1e-5
    assert (total(dla) - own).abs().max() < 1e-4


def test_a_post_norm_heads_attribution_is_carried_forward_through_each_later_norm() -> None:
    """Independently of the backward sweep: layer 1's cross head 2 written through W_O, then
    through every later sublayer norm forwards (centred, over that norm's σ on this pass, times
    γ; β left out: it is a part of its own), dotted with the written word's output row."""
    model = tiny("bart")
    src, tgt = torch.tensor([SOURCE]), torch.tensor([TARGET])
    with torch.no_grad():
        _, trace = tracing.run(model, src, tgt)
        _, dla = inspect(model, SOURCE, TARGET)
        heads = trace.heads[(0, "cross")][0].clone()  # (T, H, Dh)
        heads[:, 0] = 0
        v = heads.flatten(1) @ model.decoder_layers[0].cross_attn.out_proj.weight.T  # (T, D)
        later = [(0, "cross"), (0, "ff"), (1, "self"), (1, "cross"), (1, "ff")]
        for i, kind in later:
            norm = getattr(layers.general(model.decoder_layers[i]), f"norm_{kind}")
            j = trace.labels.index(f"{i + 1}.{kind}")
            y = trace.points[j - 1][0] + trace.parts[(i, kind)][0]
            sigma = (y.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
            v = (v - v.mean(-1, keepdim=True)) / sigma * norm.weight
        expected = (v * model.output.weight[tgt[0]]).sum(-1)
    assert dla is not None and torch.allclose(dla.heads["cross"][0, 1], expected, atol=1e-5)


def test_an_rnn_is_refused_with_the_reason() -> None:
    rnn = build_model(tiny_config("rnn", "additive", 40)).eval()
    with pytest.raises(NotApplicable, match="residual stream"):
        inspect(rnn, SOURCE, TARGET)


SHIPPED = Path(__file__).resolve().parents[2] / "models" / "en-de-transformer"


@pytest.mark.skipif(not (SHIPPED / "config.json").exists(), reason="the shipped en-de-transformer is not here")
def test_the_shipped_transformer_lens_and_attribution() -> None:
    """On the real model (read only): the lens ends at the model's output, the parts add up, and
    every word of its greedy translation emerges at some point."""
    loaded = load_model_folder(SHIPPED)
    (result,) = Translator(loaded).translate(["The man is reading."], beam_size=1)
    found, dla = inspect(loaded.model, result.source_ids, result.target_ids)
    src, tgt = torch.tensor([result.source_ids]), torch.tensor([result.target_ids])
    with torch.no_grad():
        own = torch.log_softmax(loaded.model(src, tracing.target_input(loaded.model, tgt)).logits[0], -1)
    assert (found.log_probs - own).abs().max() < 1e-5
    assert dla is not None and (total(dla) - dla.logit).abs().max() < 1e-4
    assert all(e is not None for e in found.emergence)
