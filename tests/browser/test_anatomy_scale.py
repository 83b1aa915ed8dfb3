"""The anatomy panel (static/js/anatomy.js) in real Chromium follows the answer's ``score_scale``:
a model that divides q·k by √d_k shows the q·k column and the division, one that does not (an
imported T5: ``score_scale`` 1.0) shows its scores as they are and says so."""

from __future__ import annotations

import math
from typing import Any

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

RENDER = """async (details) => {
  const { renderAnatomy } = await import("/static/js/anatomy.js");
  const root = document.createElement("div");
  root.innerHTML = '<p data-role="anatomy-title"></p><div data-role="anatomy-body"></div>';
  document.body.append(root);
  const weights = renderAnatomy(root, details, { kind: "cross", layer: 0, head: 0, query: 0 });
  const heads = [...root.querySelectorAll("thead th")].map((th) => th.textContent);
  const cells = [...root.querySelectorAll("tbody tr:first-child td.num")].map((td) => td.textContent);
  root.remove();
  return { weights, heads, cells, text: root.textContent };
}"""


def _details(score_scale: float | None) -> dict[str, Any]:
    scores = [2.0, 0.0]
    total = sum(math.exp(s) for s in scores)
    answer: dict[str, Any] = {
        "source_tokens": ["▁A", "</s>"], "target_tokens": ["▁Ein"], "decoder_input_tokens": ["<s>"],
        "score": None, "key_dim": 16, "attention_scores": {"cross": [[[scores]]]},
        "attention": {"cross": [[[[math.exp(s) / total for s in scores]]]]},
    }  # fmt: skip
    if score_scale is not None:
        answer["score_scale"] = score_scale
    return answer


def test_scaled_scores_show_q_dot_k_and_the_division(page: Page, server_url: str) -> None:
    page.goto(server_url + "/")
    shown = page.evaluate(RENDER, _details(4.0))
    assert "q · k" in shown["heads"] and "÷ √16 = score" in shown["heads"]
    assert shown["cells"][:2] == ["8.00", "2.000"]  # q·k = score × √d_k
    assert "not scaled" not in shown["text"]


def test_unscaled_scores_have_no_division(page: Page, server_url: str) -> None:
    page.goto(server_url + "/")
    shown = page.evaluate(RENDER, _details(1.0))
    assert "q · k" not in shown["heads"] and not any("÷" in h for h in shown["heads"])
    assert "score" in shown["heads"] and shown["cells"][0] == "2.000"
    assert "scores are q·k (+ position bias), not scaled" in shown["text"] and "/ √d_k" not in shown["text"]
    assert shown["weights"] == pytest.approx([math.exp(2) / (math.exp(2) + 1), 1 / (math.exp(2) + 1)])
