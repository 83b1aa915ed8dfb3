"""The Translate page as a first-time reader meets it: the heatmap above the fold, layers and
heads counted from 1 everywhere, "▁" explained, the beam tree open on its chosen path with the
scores it ranked by, the attribution panel honest about what it shows, phones given full-width
plots."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_pages import SENTENCE, TRANSFORMER, open_translate, translate, wait_drawn

pytestmark = pytest.mark.browser

LONG = "The man in the red shirt is cooking dinner for his family."


def test_the_first_heatmap_starts_above_the_fold_and_the_word_marker_is_explained(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/?model={TRANSFORMER}")  # a first visit: an example, translated
    page.wait_for_selector("body[data-ready=true]")
    wait_drawn(page, "#explorer [data-role=plot-main]")
    page.evaluate("window.scrollTo(0, 0)")
    top = page.locator("#explorer [data-role=plot-main]").bounding_box()["y"]
    assert top < 900 - 100, f"the heatmap starts at {top}px of a 900px window"  # its top rows in view
    note = page.locator("#explorer [data-role=piece-note]")
    expect(note).to_be_visible()
    expect(note).to_contain_text("▁ marks the first piece of a word")
    shoot(page, "translate-1400")


def test_text_typed_while_the_model_list_loads_is_kept_not_replaced_by_the_example(page: Page, server_url: str) -> None:
    typed = "Three cats sleep on a red sofa."  # not one of the examples
    held: list[Any] = []
    page.route("**/api/models", lambda route: held.append(route))  # the list arrives only when released below
    with page.expect_request("**/api/models"):
        page.goto(f"{server_url}/")
    page.fill("#text", typed)
    held[0].continue_()
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#model")).not_to_have_value("")
    expect(page.locator("#text")).to_have_value(typed)
    page.click("#translate-btn")
    expect(page).to_have_url(re.compile(r"text=Three\+cats"))


def test_layers_and_heads_are_counted_from_one_and_the_page_says_once_that_the_api_counts_from_0(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    translate(page, SENTENCE)
    expect(page.locator("#explorer [data-role=layer] option")).to_have_text(["Layer 1", "Layer 2"])
    chips = page.locator("#heads-card [data-head]")
    expect(chips).to_have_count(4)
    assert [re.match(r"L\d · H\d", t).group(0) for t in chips.all_inner_texts()] == ["L1 · H1", "L1 · H2", "L2 · H1", "L2 · H2"]
    table = page.locator("#explorer [data-role=head-table] tbody th")
    assert sorted(table.all_inner_texts()) == ["L1 · H1", "L1 · H2", "L2 · H1", "L2 · H2"]
    page.locator("#heads-card [data-role=heads-attribution]").click()
    rows = page.locator("#heads-card [data-role=heads-correlation] tbody th")
    expect(rows).to_have_text(["Layer 1", "Layer 2"], timeout=60_000)
    expect(page.locator("#heads-card [data-role=heads-correlation] thead th")).to_have_text(["ρ", "H1", "H2"])
    text = page.locator("body").inner_text()
    assert len(re.findall(r"count from 0", text)) == 1, "the 0-based API is explained once"
    hint = page.locator("#explorer [data-role=count-hint]").inner_text()
    assert "count from 0" in hint
    rest = text.replace(hint, "")
    assert not re.search(r"\bL\d+ ?H\d+\b|\bL0\b|\bH0\b", rest), "a head named the API's way (from 0) on the page"


def visible_in(page: Page, box_selector: str, item_selector: str) -> list[bool]:
    """Whether each item lies inside the scroll box's visible rectangle."""
    return list(page.evaluate(
        """([box, items]) => {
            const b = document.querySelector(box).getBoundingClientRect();
            return [...document.querySelectorAll(items)].map((n) => {
                const r = n.getBoundingClientRect();
                return r.top >= b.top - 1 && r.bottom <= b.bottom + 1;
            });
        }""",
        [box_selector, item_selector],
    ))


def test_the_beam_tree_opens_on_its_chosen_path_with_the_scores_it_ranked_by(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    open_translate(page, server_url)
    response = translate(page, LONG, beam=16)
    card = page.locator("#beam-card")
    box = "#beam-card [data-role=tree-main] .beam-scroll"
    assert page.eval_on_selector(box, "b => b.scrollHeight > b.clientHeight"), "the tree fits its box: this shows nothing"
    marks = "#beam-card [data-role=tree-main] .node.best .mark"
    page.wait_for_function(
        """([box, marks]) => { const b = document.querySelector(box).getBoundingClientRect();
            return [...document.querySelectorAll(marks)].every((n) => { const r = n.getBoundingClientRect();
                return r.top >= b.top - 1 && r.bottom <= b.bottom + 1; }); }""",
        arg=[box, marks],
    )
    assert all(visible_in(page, box, marks))
    hypotheses = response["beam"]["hypotheses"]
    items = card.locator("[data-role=tree-main] .hypotheses li")
    rankings = [float(items.nth(i).get_attribute("data-ranking")) for i in range(items.count())]
    assert rankings == sorted(rankings, reverse=True)  # sorted by the score shown
    for i in range(items.count()):
        ranking = float(items.nth(i).get_attribute("data-ranking"))
        score = float(items.nth(i).get_attribute("data-score"))
        expect(items.nth(i)).to_contain_text(f"ranked by {ranking:.2f} (length-normalised) · log-prob {score:.2f}")
        expect(items.nth(i)).not_to_contain_text("(empty)")
    assert items.count() == min(5, sum(1 for i, h in enumerate(hypotheses) if h["translation"] or i == 0))
    n = len(hypotheses)
    expect(card.locator("[data-role=tree-main] > .hint").first).to_contain_text(f"{n} finished {'hypothesis' if n == 1 else 'hypotheses'}")
    # a greedy tree beside it: one finished hypothesis, said in the singular
    card.locator("[data-role=beam-other]").fill("1")
    card.locator("[data-role=beam-compare]").click()
    expect(card.locator("[data-role=tree-other] > .hint").first).to_contain_text("1 finished hypothesis")
    expect(card.locator("[data-role=tree-other] > .hint").first).not_to_contain_text("hypotheses")
    shoot(page, "beam-16")


def mean(heads: list[list[list[float]]]) -> list[list[float]]:
    return [[sum(h[t][s] for h in heads) / len(heads) for s in range(len(heads[0][0]))] for t in range(len(heads[0]))]


def test_attribution_uses_the_sentence_translated_with_the_steps_asked_and_says_which_attention_it_averages(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    open_translate(page, server_url)
    shown = translate(page, SENTENCE, beam=2)
    page.fill("#text", "Two dogs play in the snow.")  # typed after translating: not what is on screen
    card = page.locator("#heads-card")
    card.locator("[data-role=attribution-steps]").fill("8")
    with page.expect_response("**/api/attribution") as answer:
        card.locator("[data-role=heads-attribution]").click()
    body = answer.value.request.post_data_json
    assert (body["text"], body["steps"], body["beam_size"]) == (SENTENCE, 8, 2)
    assert body["target"] == shown["translation"]  # the translation on screen, not a new decode
    r: dict[str, Any] = answer.value.json()
    expect(card.locator("[data-role=heads-status]")).to_contain_text("with 8 steps: completeness gap")
    for chart in ("attribution", "attention-mean"):
        wait_drawn(page, f"#heads-card [data-chart={chart}]")
        assert page.eval_on_selector(f"#heads-card [data-chart={chart}]", "gd => gd.data[0].showscale") is True  # a colour bar
    choice = card.locator("[data-role=attribution-layer]")
    expect(choice.locator("option")).to_have_text(["layer 1: mean of its 2 heads", "layer 2: mean of its 2 heads", "all 2 layers × 2 heads: mean of 4"])
    z = page.eval_on_selector("#heads-card [data-chart=attention-mean]", "gd => gd.data[0].z")
    cross = r["cross_attention"]
    for got, want in zip(z, mean(cross[-1]), strict=True):  # the last layer's heads only
        assert got == pytest.approx(want, abs=1e-9)
    expect(page.locator("#heads-card [data-chart=attention-mean] .gtitle")).to_have_text("Attention (layer 2, mean of its heads)")
    choice.select_option("all")
    expect(page.locator("#heads-card [data-chart=attention-mean] .gtitle")).to_have_text("Attention (mean of every layer's heads)")
    z = page.eval_on_selector("#heads-card [data-chart=attention-mean]", "gd => gd.data[0].z")
    for got, want in zip(z, mean([h for layer in cross for h in layer]), strict=True):
        assert got == pytest.approx(want, abs=1e-9)
    # switching heads off also works on the sentence translated
    card.locator("[data-head='0:0']").click()
    with page.expect_request(lambda q: q.url.endswith("/api/translate") and "disable_heads" in (q.post_data or "")) as request:
        card.locator("[data-role=heads-run]").click()
    assert request.value.post_data_json["text"] == SENTENCE
    shoot(page, "attribution")


def test_on_a_phone_your_own_target_heatmaps_use_the_full_width(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.set_viewport_size({"width": 390, "height": 844})
    open_translate(page, server_url)
    translate(page, SENTENCE)
    page.fill("#target", "Ein Mann fährt Fahrrad.")
    page.click("#align-btn")
    wait_drawn(page, "#explorer [data-role=plot-aligned]")
    for which in ("main", "aligned"):
        card = page.locator(f"#explorer [data-role=plot-{which}]").locator("xpath=ancestor::figure[1]")
        room = card.bounding_box()["width"]
        drawn = page.eval_on_selector(f"#explorer [data-role=plot-{which}]", "gd => gd._fullLayout.width")
        assert drawn >= 0.85 * (room - 30), f"{which}: drawn {drawn}px in a {room}px card"
    shoot(page, "aligned-390")
