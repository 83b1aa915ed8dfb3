"""Fixtures for the end-to-end tests: the real server on a free localhost port, serving tiny
models whose cards carry BLEU and learning curves, and Debian's Chromium driven by Playwright.

These tests are never skipped: without Chromium they fail with a message saying how to get it
(``make test`` installs it where it can). Set ``ATTNSCOPE_SHOTS`` to a folder to get a copy of
the screenshots there as well as in each test's ``tmp_path``."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from attnscope.testing import running_server

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
MARKUP = "</script><script>alert(1)</script><img src=x onerror=alert(1)>"


def chromium_path() -> str:
    """Debian's Chromium (or ``$ATTNSCOPE_CHROMIUM``); fails, never skips, when there is none."""
    candidates = [
        os.environ.get("ATTNSCOPE_CHROMIUM"),
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(
        "the browser tests need Chromium: run `make chromium` (or `apt-get install chromium`) "
        "or set ATTNSCOPE_CHROMIUM to a Chromium binary",
        pytrace=False,
    )


F1 = [[0.25, 0.75], [0.5, 0.875]]
SCORES = {"precision": 0.5, "recall": 0.5, "f1": 0.5, "aer": 0.5}
ALIGNMENT_CARD = {  # every key `attnscope evaluate --alignment` writes (the server drops a section that does not parse)
    "split": "test2016", "f1": F1, "aer": [[1 - v for v in row] for row in F1], "precision": F1, "recall": F1,
    "per_layer": [{**SCORES, "f1": 0.5}, {**SCORES, "f1": 0.625}], "average_of_heads": {**SCORES, "f1": 0.625},
    "diagonal": {**SCORES, "f1": 0.55}, "best_head": {"layer": 1, "head": 1, "f1": 0.875},
    "worst_head": {"layer": 0, "head": 0, "f1": 0.25},
}
ABLATION_CARD = {"split": "test2016", "beam_size": 5, "baseline": 30.0,
                 "bleu_without_head": {"cross": [[29.5, 30.0], [25.0, 30.25]]}}


def enrich_cards(models_dir: Path) -> None:
    """Give the tiny models what trained ones have in their cards (BLEU, curves, timings), except
    the no-attention RNN, which keeps its partial card so the page's fallbacks are exercised."""
    for rank, folder in enumerate(sorted(p for p in models_dir.iterdir() if p.is_dir())):
        if folder.name.endswith("rnn-none"):
            continue
        card_path = folder / "card.json"
        card = json.loads(card_path.read_text())
        base = 20.0 + 4 * rank
        card.update(
            training={
                "time_s": 600 + 300 * rank,
                "hardware": "2 CPU cores",
                "epochs": 4,
                "steps": 400,
            },
            hyperparameters={  # as training writes them: the model's config and the recipe
                "model": json.loads((folder / "config.json").read_text())["model"],
                "training": {"lr": 1e-3, "batch_tokens": 4096},
            },
            curve=[
                {
                    "epoch": e,
                    "step": 100 * e,
                    "train_loss": 5 / math.sqrt(e),
                    "val_loss": 5.5 / math.sqrt(e),
                    "val_bleu": base * (1 - math.exp(-e / 2)),
                }
                for e in range(1, 5)
            ],
            bleu={
                name: {
                    "cased": base - drop,
                    "lowercase_13a": base - drop + 1,
                    "signature_cased": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.2",
                    "signature_lowercase": "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.4.2",
                }
                for name, drop in (("test2016", 0), ("test2017", 3), ("mscoco2017", 6))
            },
            chrf={  # what evaluate writes beside BLEU (sacreBLEU's chrF2 of the same translations)
                name: {"score": base + 30 - drop, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.2"}
                for name, drop in (("test2016", 0), ("test2017", 3), ("mscoco2017", 6))
            },
            bleu_by_length={
                "test2016": [
                    {"bucket": bucket, "sentences": 100, "bleu": base + 3 - 2 * i}
                    for i, bucket in enumerate(["1-8", "9-12", "13-16", "17+"])
                ]
            },
            beam_size=5,
            note=f"trained by {MARKUP}",  # card text is shown as text too
        )
        if folder.name.endswith("rnn-additive"):  # what bench/confidence.py --write adds: a tiny
            card["confidence"] = {"threshold": 0.0, "quantile": 0.05}  # model's every output is flagged
        if folder.name.endswith("transformer"):  # what evaluate --alignment / --ablate add
            card.update(alignment=ALIGNMENT_CARD, ablation=ABLATION_CARD)
        card_path.write_text(json.dumps(card, indent=2) + "\n")


@pytest.fixture(scope="session")
def card_markup() -> str:
    """Markup put into a model card's note: the Models page must show it as text."""
    return MARKUP


@pytest.fixture(scope="session")
def browser_models_dir(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser") / "models"
    shutil.copytree(tiny_models_dir, root)
    enrich_cards(root)
    return root


@pytest.fixture(scope="session")
def server_url(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`attnscope serve` on a free port, as a user would start it; stopped at the end."""
    with running_server(browser_models_dir, tmp_path_factory.mktemp("server") / "server.log") as url:
        yield url


# What `attnscope evaluate --explain` writes into two cards (0-based [layer][head] grids; per-layer
# methods have one column), for the explanation views' tests (test_explain_panels, test_explain_view)
CARD_EXPLANATIONS = {
    "en-de-transformer": {
        "weights": {"per": "head", "alignment": {"f1": [[0.1, 0.2], [0.3, 0.25]]}, "spearman_ig": [[0.1, 0.0], [0.2, 0.3]]},
        "norm": {"per": "head", "alignment": {"f1": [[0.15, 0.35], [0.3, 0.2]]}, "spearman_ig": [[0.2, 0.1], [0.4, 0.3]]},
        "alti": {"per": "layer", "alignment": {"f1": [[0.4], [0.75]]}, "spearman_ig": [[0.1], [0.2]]},
    },
    "en-de-rnn-additive": {
        "weights": {"per": "head", "alignment": {"f1": [[0.45]]}, "spearman_ig": [[0.5]]},
        "norm": {"per": "head", "alignment": {"f1": [[0.5]]}, "spearman_ig": [[0.55]]},
    },
}


@pytest.fixture(scope="session")
def explained_server_url(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The browser tests' models, two cards carrying an `explanations` section
    (:data:`CARD_EXPLANATIONS`): one server for every module that draws them."""
    root = tmp_path_factory.mktemp("explained") / "models"
    shutil.copytree(browser_models_dir, root)
    for name, methods in CARD_EXPLANATIONS.items():
        path = root / name / "card.json"
        card = json.loads(path.read_text())
        card["explanations"] = {"split": "test2016", "sentences": 6, "ig_steps": 4, "methods": methods}
        path.write_text(json.dumps(card))
    with running_server(root, tmp_path_factory.mktemp("explained-server") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="session")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    browser = playwright_instance.chromium.launch(
        executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


class PageWatch:
    """What a page did that it should not: uncaught script errors, dialogs, requests to other
    hosts, and anything the server's Content-Security-Policy had to block."""

    def __init__(self, page: Page, origin: str) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.blocked: list[str] = []
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        page.on(
            "console",
            lambda msg: self.blocked.append(msg.text) if "Content Security Policy" in msg.text else None,
        )
        page.on("dialog", self._dialog)
        page.on(
            "request",
            lambda req: (
                None
                if req.url.startswith((origin, "data:", "blob:"))
                else self.foreign.append(req.url)
            ),
        )

    def _dialog(self, dialog) -> None:  # type: ignore[no-untyped-def]
        self.dialogs.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def page(browser: Browser, server_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    watch = PageWatch(page, server_url)
    page.watch = watch  # type: ignore[attr-defined]
    yield page
    context.close()
    assert not watch.errors, f"the page raised: {watch.errors}"
    assert not watch.dialogs, f"a dialog opened: {watch.dialogs}"
    assert not watch.foreign, f"the page fetched from elsewhere: {watch.foreign}"
    assert not watch.blocked, f"the Content-Security-Policy blocked: {watch.blocked}"


@pytest.fixture
def shoot(tmp_path: Path):  # type: ignore[no-untyped-def]
    """shoot(page, name): a full-page screenshot in tmp_path (and in $ATTNSCOPE_SHOTS if set)."""

    def take(page: Page, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        page.mouse.move(0, 0)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(path), full_page=True)
        extra = os.environ.get("ATTNSCOPE_SHOTS")
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(extra) / path.name)
        return path

    return take


def origin_of(page_url: str) -> str:
    """scheme://host:port of a page's URL (the server that answered it)."""
    from urllib.parse import urlparse

    parts = urlparse(page_url)
    return f"{parts.scheme}://{parts.netloc}"


def inline_attention(server_url: str, answer: dict[str, Any], precision: int | None = None) -> dict[str, Any]:
    """An on-demand answer (the Translate page asks for attention on demand) with its matrices
    filled in from GET /api/attention/{id}/{kind}/{layer}, as an inline answer carries them; other
    answers as they are. ``precision``: the request's (6, the default, when not given)."""
    if not answer.get("attention_id"):
        return answer
    import json as _json
    import urllib.request as _request

    decimals = 6 if precision is None else precision
    filled = dict(answer)
    filled["attention"] = {}
    for kind, shape in (answer.get("attention_shapes") or {}).items():
        layers = []
        for layer in range(shape["layers"]):
            url = f"{server_url}/api/attention/{answer['attention_id']}/{kind}/{layer}?precision={decimals}"
            with _request.urlopen(url, timeout=30) as reply:
                layers.append(_json.loads(reply.read()))
        filled["attention"][kind] = layers
    return filled
