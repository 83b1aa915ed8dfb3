"""``attnscope evaluate --alignment`` on a decoder-only folder: per (layer, query head) F1 against a
hand-written links file, one head's F1 recomputed here by hand (own piece -> word map from the
decoded tokens, own argmax and counts), the card's best head, and the /llm page opening on it."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

from attnscope.cli import main
from attnscope.llm.folder import load_llm_folder
from attnscope.llm.translator import LLMTranslator
from attnscope.testing import in_own_thread, running_server

CHROMIUM = os.environ.get("ATTNSCOPE_CHROMIUM", "/usr/bin/chromium")
PAIRS = [  # source, target, links (source word - target word)
    ("Two dogs play in the snow .", "Zwei Hunde spielen im Schnee .", "0-0 1-1 2-2 3-3 4-3 5-4 6-5"),
    ("A man reads", "Ein Mann liest", "0-0 1-1 2-2"),
]


def _links_file(folder: Path) -> Path:
    path = folder / "links.tsv"
    path.write_text("".join(f"{s}\t{t}\t{links}\n" for s, t, links in PAIRS), encoding="utf-8")
    return path


def _char_words(text: str, token_texts: list[str], skip: int) -> list[int]:
    """Word (whitespace token) of each token whose decoded texts, concatenated, hold ``text``
    from character ``skip``; a whitespace-only token goes to the next word."""
    bounds, cursor = [], -skip
    for piece in token_texts:
        bounds.append((cursor, cursor + len(piece)))
        cursor += len(piece)
    words, k = [], 0
    for w in text.split():
        start = text.index(w, k)
        words.append((start, start + len(w)))
        k = start + len(w)
    out: list[int | None] = []
    for a, b in bounds:
        overlap = [max(0, min(b, e) - max(a, s)) for s, e in words]
        out.append(overlap.index(max(overlap)) if max(overlap) > 0 else None)
    for i in range(len(out) - 2, -1, -1):
        out[i] = out[i + 1] if out[i] is None else out[i]
    return [len(words) - 1 if w is None else w for w in out]


def _hand_f1(folder: Path, layer: int, head: int) -> float:
    translator = LLMTranslator(load_llm_folder(folder))
    backend = translator.loaded.tokenizer.backend
    correct = hypothesis = reference = 0
    for source, target, links in PAIRS:
        result = translator.align(source, target)
        prompt = result.prompt
        s0, s1 = prompt.source_span
        src_texts = [backend.decode([i]) for i in prompt.ids[s0:s1]]
        src_words = _char_words(source, src_texts, "".join(src_texts).index(source))
        tgt_ids = result.target_ids[:-1]  # the stop token is not a word
        tgt_words = _char_words(target, [backend.decode([i]) for i in tgt_ids], 0)
        full = result.generation.attention[layer, head]  # (n, n) the causal matrix
        n_src, n_tgt = len(source.split()), len(target.split())
        best = []
        for j in range(n_tgt):
            rows = [len(prompt.ids) - 1 + t for t, w in enumerate(tgt_words) if w == j]  # the producing steps
            weight = [sum(float(full[r, s0 + s]) for r in rows for s, v in enumerate(src_words) if v == i) / len(rows)
                      for i in range(n_src)]  # fmt: skip
            best.append(weight.index(max(weight)))
        ref = {tuple(map(int, x.split("-"))) for x in links.split()}
        correct += sum((i, j) in ref for j, i in enumerate(best))
        hypothesis += n_tgt
        reference += len(ref)
    p, r = correct / hypothesis, correct / reference
    return round(2 * p * r / (p + r), 4) if p + r else 0.0


@pytest.mark.parametrize("layout", ["gpt2", "qwen2"])
def test_evaluate_alignment_scores_every_query_head(llm_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    layout: str) -> None:  # fmt: skip
    folder = tmp_path / "models" / f"en-de-{layout}"
    shutil.copytree(llm_models / f"en-de-{layout}", folder)
    links = _links_file(tmp_path)
    assert main(["evaluate", str(folder), "--alignment", "--links", str(links), "--update-card"]) == 0
    printed = json.loads(capsys.readouterr().out)
    card = json.loads((folder / "card.json").read_text())["alignment"]
    assert card == printed and card["sentences"] == 2
    config = load_llm_folder(folder).config
    assert len(card["f1"]) == config.layers and all(len(row) == config.heads for row in card["f1"])
    for layer, head in [(0, 0), (config.layers - 1, config.heads - 1)]:
        assert card["f1"][layer][head] == _hand_f1(folder, layer, head)
    flat = [(f1, layer, head) for layer, row in enumerate(card["f1"]) for head, f1 in enumerate(row)]
    assert card["best_head"] == {"layer": max(flat)[1], "head": max(flat)[2], "f1": max(flat)[0]}


def test_bad_links_and_modes_are_one_line_errors(llm_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = llm_models / "en-de-gpt2"
    bad = tmp_path / "bad.tsv"
    bad.write_text("A man\tEin Mann\t0-0 5-1\n", encoding="utf-8")
    assert main(["evaluate", str(folder), "--alignment", "--links", str(bad)]) != 0
    assert "bad.tsv:1: a link points past the 2 source or 2 target words" in capsys.readouterr().err
    assert main(["evaluate", str(folder)]) != 0
    assert "evaluate takes it with --alignment only" in capsys.readouterr().err


def test_the_page_opens_on_the_best_head(llm_models: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail("the page test needs Chromium (apt-get install chromium, or set ATTNSCOPE_CHROMIUM)", pytrace=False)
    folder = tmp_path / "models" / "en-de-qwen2"
    shutil.copytree(llm_models / "en-de-qwen2", folder)
    assert main(["evaluate", str(folder), "--alignment", "--links", str(_links_file(tmp_path)), "--update-card"]) == 0
    best = json.loads((folder / "card.json").read_text())["alignment"]["best_head"]
    config = load_llm_folder(folder).config
    assert (best["layer"], best["head"]) != (config.layers - 1, 0), "pick a layout whose best head is not the default"
    with running_server(folder.parent, tmp_path / "server.log") as url:
        with urllib.request.urlopen(f"{url}/api/llm/models", timeout=30) as response:
            served = json.loads(response.read())["models"][0]
        assert served["best_head"] == best
        def drive() -> None:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page()
                page.goto(f"{url}/llm")
                page.wait_for_function("sel => document.querySelector(sel).value !== ''", arg="#llm-model")
                page.fill("#llm-text", "A man reads.")
                page.click("#llm-go")
                page.wait_for_selector("#llm-plot .main-svg", timeout=60_000)
                assert (page.input_value("#llm-layer"), page.input_value("#llm-head")) == (str(best["layer"]), str(best["head"]))
                browser.close()

        in_own_thread(drive)


def test_align_corpus_references_score_as_the_links_file(llm_models: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The same links, once as an align-corpus references file over Moses words (here the same
    words) beside a corpus split, score every head exactly as the hand-written file does."""
    from attnscope.alignment.corpus import AlignedPair, references_path, write_references
    from attnscope.alignment.links import parse_pharaoh
    from attnscope.alignment.words import word_spans
    from attnscope.text.corpus import SPLITS

    data = tmp_path / "data"
    data.mkdir()
    (data / f"{SPLITS['test2016']}.en").write_text("\n".join(s for s, _, _ in PAIRS) + "\n", encoding="utf-8")
    (data / f"{SPLITS['test2016']}.de").write_text("\n".join(t for _, t, _ in PAIRS) + "\n", encoding="utf-8")
    refs = [AlignedPair(parse_pharaoh(links), word_spans(s, "en"), word_spans(t, "de")) for s, t, links in PAIRS]
    write_references(references_path(data / "alignments", "test2016", "en", "de"), refs)
    folder = llm_models / "en-de-gpt2"
    assert main(["evaluate", str(folder), "--alignment", "--data-dir", str(data)]) == 0
    from_corpus = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(folder), "--alignment", "--links", str(_links_file(tmp_path))]) == 0
    from_links = json.loads(capsys.readouterr().out)
    assert from_corpus["split"] == "test2016" and from_corpus["f1"] == from_links["f1"]
    assert "eflomal" in from_corpus["convention"] and "hand-written" in from_links["convention"]
