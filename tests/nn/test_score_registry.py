"""The registry of score functions is the one place each lives: every entry builds its own
module, the formulas share one notation, the generated findings table agrees with it, and a
score function registered from outside trains through an RNN with no other edit."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor

from attnscope.nn.config import SCORES, RNNConfig
from attnscope.nn.factory import build_model
from attnscope.nn.scores import SCORE_FUNCTIONS, Score, ScoreFunction, build_score, register_score

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"


def test_scores_are_the_registry_in_table_order_with_no_attention_last() -> None:
    assert SCORES == tuple(SCORE_FUNCTIONS) and SCORES[-1] == "none"
    assert len({f.label for f in SCORE_FUNCTIONS.values()}) == len(SCORES)


@pytest.mark.parametrize("name", [n for n in SCORES if n != "none"])
def test_each_entry_builds_its_own_module(name: str) -> None:
    function = SCORE_FUNCTIONS[name]
    assert function.module is not None and type(build_score(name, 8, 16)) is function.module
    assert function.formula and function.latex and function.paper and function.parameters


def test_one_notation_s_h_i_and_their_size_n() -> None:
    """h_i is the encoder state; its size is n (never √h, the disagreement issue 29 found)."""
    for function in SCORE_FUNCTIONS.values():
        text = " ".join((function.formula, function.parameters, function.reading))
        assert "√h" not in text and "ℝ^{h" not in text and "ℝ^h" not in text, function.name
    assert SCORE_FUNCTIONS["scaled_dot"].formula == "sᵀ h_i / √n"


def test_the_findings_table_is_the_registrys() -> None:
    """docs/findings.md (scripts/score_table.py --write) shows each registered formula."""
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \|", FINDINGS.read_text(), flags=re.MULTILINE)
    assert rows
    for name, formula in rows:
        assert formula == SCORE_FUNCTIONS[name].formula, name


class HalfDotScore(Score):
    """sᵀ h_i / 2: a score function from outside the package."""

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1) / 2  # (N, S)


@pytest.fixture
def half_dot() -> Iterator[ScoreFunction]:
    function = register_score(ScoreFunction(
        name="half_dot", label="half dot", formula="sᵀ h_i / 2", latex=r"s^\top h_i / 2", paper="a test",
        parameters="none", reading="dot, flatter", module=HalfDotScore, factory=lambda dim, _: HalfDotScore(),
    ))  # fmt: skip
    try:
        yield function
    finally:
        del SCORE_FUNCTIONS["half_dot"]


def test_a_registered_score_function_is_one_an_rnn_can_use(half_dot: ScoreFunction) -> None:
    model = build_model(RNNConfig(vocab_size=20, score="half_dot", emb_dim=8, hidden_dim=8))
    assert isinstance(model.score, HalfDotScore)
    out = model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]]), need_weights=True)
    assert out.cross is not None
    torch.testing.assert_close(out.cross.sum(-1), torch.ones(1, 1, 1, 2))
    with pytest.raises(ValueError, match="already registered"):
        register_score(half_dot)


def test_the_readmes_model_table_names_each_score_function_by_its_label() -> None:
    """Each README row of an RNN named for its score function describes it by the registry's
    label (the floor: "without attention"), and every registered score function has a row."""
    readme = (FINDINGS.parents[1] / "README.md").read_text()
    rows = re.findall(r"^\| `en-\w\w-rnn-(\w+)` \| ([^|]+) \|", readme, flags=re.MULTILINE)
    assert {name for name, _ in rows} == set(SCORE_FUNCTIONS)
    for name, description in rows:
        label = "without attention" if name == "none" else SCORE_FUNCTIONS[name].label
        assert label in description, (name, description)
