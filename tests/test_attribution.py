"""Gradient attribution: integrated gradients satisfy completeness, input × gradient is the
α = 1 end of the same path, rows normalise, and Spearman's ρ behaves on hand-made rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnscope.attribution import attribute, correlations, normalise_rows, spearman_rows, summary
from attnscope.nn.config import EOS_ID
from attnscope.nn.factory import build_model
from attnscope.testing import tiny_config

torch.set_num_threads(1)

SOURCE = [5, 9, 14, 7, EOS_ID]
TARGET = [11, 6, 20, EOS_ID]


def tiny(architecture: str, score: str = "additive") -> torch.nn.Module:
    torch.manual_seed(3)
    config = dataclasses.replace(tiny_config(architecture, score, 40))
    return build_model(config).eval()


@pytest.mark.parametrize(("architecture", "score"), [("transformer", "additive"), ("rnn", "additive"),
                                                     ("rnn", "none"), ("self_attentive_rnn", "additive")])
def test_integrated_gradients_are_complete(architecture: str, score: str) -> None:
    """Σ_s IG[t, s] = f_t(x) − f_t(0) for every target token, up to the trapezoid's error."""
    model = tiny(architecture, score)
    attr = attribute(model, SOURCE, TARGET, steps=64)  # type: ignore[arg-type]
    diff = attr.f - attr.f_baseline
    assert diff.abs().max() > 1e-3  # the source matters, so the check is not 0 = 0
    assert torch.allclose(attr.integrated_gradients.sum(-1), diff, atol=2e-3 + 0.01 * float(diff.abs().max()))
    assert attr.integrated_gradients.shape == attr.input_x_gradient.shape == (len(TARGET), len(SOURCE))


def test_more_steps_bring_the_integral_closer() -> None:
    model = tiny("transformer")
    coarse = attribute(model, SOURCE, TARGET, steps=2).completeness_gap.abs().max()  # type: ignore[arg-type]
    fine = attribute(model, SOURCE, TARGET, steps=64).completeness_gap.abs().max()  # type: ignore[arg-type]
    assert fine < coarse


def test_input_x_gradient_is_the_end_of_the_integration_path() -> None:
    """With one trapezoid step IG = ½(x·∇f(0) + x·∇f(x)); x·∇f(0) comes from a second model
    whose embeddings are the scaled-down ones, so this ties both methods to plain autograd."""
    model = tiny("transformer")
    one = attribute(model, SOURCE, TARGET, steps=1)  # type: ignore[arg-type]
    with torch.no_grad():
        model.embed.weight.mul_(1e-6)  # type: ignore[union-attr, operator]
    near_zero = attribute(model, SOURCE, TARGET, steps=1)  # type: ignore[arg-type]
    # at x ≈ 0 the gradient is ∇f(0) and x·∇f(0) ≈ 0 · ..., so IG(x≈0) ≈ 0 and IxG ≈ 0
    assert near_zero.input_x_gradient.abs().max() < 1e-4
    assert not torch.allclose(one.integrated_gradients, one.input_x_gradient)


def test_rows_normalise_to_one() -> None:
    a = torch.tensor([[1.0, -3.0, 0.0], [0.0, 0.0, 0.0]])
    n = normalise_rows(a)
    assert torch.allclose(n[0], torch.tensor([0.25, 0.75, 0.0]))
    assert torch.equal(n[1], torch.zeros(3))  # a zero row stays zero


def test_spearman_rows() -> None:
    a = torch.tensor([[0.1, 0.5, 0.2, 0.9]])
    assert spearman_rows(a, a * 3 + 1) == pytest.approx(1.0)
    assert spearman_rows(a, -a) == pytest.approx(-1.0)
    assert spearman_rows(a, torch.tensor([[1.0, 1.0, 1.0, 1.0]])) is None  # constant: undefined
    # ties get their mean rank: [1, 2, 2, 3] against [1, 2, 3, 4] -> ρ = 0.9487 (by hand)
    assert spearman_rows(torch.tensor([[1.0, 2.0, 2.0, 3.0]]), torch.tensor([[1.0, 2.0, 3.0, 4.0]])) == pytest.approx(0.948683, abs=1e-5)


def test_attention_correlates_perfectly_with_itself() -> None:
    model = tiny("transformer")
    src, tgt = torch.tensor([SOURCE]), torch.tensor([[2] + TARGET[:-1]])
    cross = model(src, tgt, need_weights=True).cross[0]  # (L, H, T, S)
    grid = correlations(cross[1, 0], cross)
    assert grid[1][0] == pytest.approx(1.0)
    out = summary(attribute(model, SOURCE, TARGET, steps=4), cross)  # type: ignore[arg-type]
    assert len(out["correlation"]["integrated_gradients"]) == cross.size(0)
    assert torch.allclose(out["integrated_gradients"].sum(-1), torch.ones(len(TARGET)))
