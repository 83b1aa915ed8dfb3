"""The explanation methods the pages offer come from the server's registry (GET
/api/explain-methods), in real Chromium: a method registered in one module outside the package
(tests/explain/head_mean_method.py) gets a button in the explorer's switch and is drawn from its
catalog entry with no edit to the pages; and the labels shown are the catalog's, not a copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from attnscope.testing import free_port

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SWITCH = "#explorer [data-role=explain-switch]"
TEXT = "A man is riding a bicycle."
# `attnscope serve` with the test's method registered first: the one module is all it takes.
LAUNCH = "import runpy, tests.explain.head_mean_method; runpy.run_module('attnscope.cli', run_name='__main__')"


@pytest.fixture(scope="module")
def server_url(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Overrides the session server: one that registered head_mean before serving."""
    port = free_port()
    log = tmp_path_factory.mktemp("registry-server") / "server.log"
    command = [sys.executable, "-c", LAUNCH, "serve", "--host", "127.0.0.1", "--port", str(port),
               "--models-dir", str(browser_models_dir), "--only-models-dir", "--device", "cpu"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ATTNSCOPE_MAX_EXPLAIN_COST": "1000000000"}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def translate(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", "en-de-transformer")
    page.fill("#beam", "1")
    page.fill("#text", TEXT)
    with page.expect_response("**/api/translate"):
        page.press("#text", "Enter")
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_be_empty()
    expect(page.locator(SWITCH)).to_have_attribute("data-catalog", "ready")


def shown(page: Page) -> list[list[float]]:
    z: list[list[float]] = page.eval_on_selector("#explorer [data-role=plot-main]", "gd => gd.data[0].z")
    return [[round(v, 3) for v in row] for row in z]


def test_a_registered_method_is_offered_and_drawn(page: Page, server_url: str) -> None:
    translate(page, server_url)
    button = page.locator(f"{SWITCH} [data-method=head_mean]")
    expect(button).to_have_text("head mean")  # the label registered with the method
    expect(button).to_be_enabled()
    assert "averaged over its heads" in (button.get_attribute("title") or "")
    page.click("#explorer [data-role=kind] [data-kind=encoder_self]")
    page.select_option("#explorer [data-role=layer]", "1")
    page.check("#explorer [data-role=avg]")
    averaged = shown(page)  # the page's own mean of the heads' weights
    with page.expect_response("**/api/translate") as asked:
        button.click()
    assert "head_mean" in json.loads(asked.value.request.post_data or "{}")["explain"]
    expect(button).to_have_attribute("aria-checked", "true")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("showing head mean")
    drawn = shown(page)  # the server's head_mean, drawn from its catalog entry (per layer)
    assert drawn == averaged and drawn != []


def test_the_labels_come_from_the_catalog(page: Page, server_url: str) -> None:
    """Change the catalog on its way to the page: the page shows what it says."""

    def relabel(route: Route) -> None:
        data = route.fetch().json()
        for method in data["methods"]:
            method["label"] = f"«{method['name']} from the catalog»"
        route.fulfill(json=data)

    page.route("**/api/explain-methods", relabel)
    translate(page, server_url)
    for name in ("norm", "rollout", "value_zeroing", "alti", "head_mean"):
        expect(page.locator(f"{SWITCH} [data-method={name}]")).to_have_text(f"«{name} from the catalog»")
    expect(page.locator(f"{SWITCH} [data-method=weights]")).to_have_text("weights")
