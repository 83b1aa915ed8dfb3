"""Attention on demand against today's inline answers, in Chromium against the real server
(``attnscope serve``, CPU): the bytes received (as sent, gzipped where the server gzips) and the
time from pressing Enter to the first heatmap drawn on the Translate page, and after the
translation's answer arrived; then the server time of one head's fetch (``Server-Timing``),
as JSON and as float16 ``.npy``.

"today" sends the page's request without ``"attention": "on_demand"`` (intercepted), so the
same page draws the same first head from the inline answer. Each mode runs ``--runs`` times
(after one warm-up), interleaved; medians are reported.

    .venv/bin/python bench/on_demand.py [--models-dir models] [--model en-fr-transformer] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, Route, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.testing import running_server  # noqa: E402

SENTENCE_42 = (
    "On a bright Saturday morning, a young woman in a red coat walks her two small dogs along the "
    "river, while an old man on a wooden bench feeds the pigeons and a group of children play "
    "football on the wet grass near the bridge."
)
PLOT = "#explorer [data-role=plot-main]"


def one_run(page: Page, url: str, model: str, text: str, *, inline: bool) -> dict[str, float]:
    """Translate ``text`` on a fresh Translate page; bytes and times to the first heatmap."""
    finished: list[Any] = []

    def record(request: Any) -> None:
        if "/api/translate" in request.url or "/api/attention/" in request.url:
            finished.append(request)

    def today(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        body.pop("attention", None)
        route.continue_(post_data=json.dumps(body))

    page.goto(f"{url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", model)
    page.fill("#beam", "1")
    page.fill("#text", text)
    if inline:
        page.route("**/api/translate", today)
    page.on("requestfinished", record)
    start = time.perf_counter()
    with page.expect_response("**/api/translate") as answered:
        page.press("#text", "Enter")
    answered.value.finished()
    translated = time.perf_counter()
    page.wait_for_function("s => document.querySelector(s)?.data?.[0]?.z?.length > 0", arg=PLOT, polling="raf")
    drawn = time.perf_counter()
    page.remove_listener("requestfinished", record)
    sizes = [request.sizes()["responseBodySize"] for request in finished]
    if inline:
        page.unroute("**/api/translate")
    return {
        "bytes": float(sum(sizes)),
        "requests": float(len(sizes)),
        "first_heatmap_ms": (drawn - start) * 1000,
        "after_translation_ms": (drawn - translated) * 1000,
    }


def fetch_times(url: str, model: str, text: str, count: int) -> dict[str, float]:
    """Median server time (Server-Timing) of one head's fetch, JSON and float16 .npy."""
    with httpx.Client(base_url=url, timeout=120) as http:
        answer = http.post("/api/translate", json={"model": model, "text": text, "beam_size": 1, "attention": "on_demand"}).json()
        shape = answer["attention_shapes"]["cross"]
        base = f"/api/attention/{answer['attention_id']}/cross"
        out = {}
        for name, headers, params in (("json", {}, {}), ("npy16", {"Accept": "application/x-npy"}, {"dtype": "float16"})):
            spent = []
            for i in range(count):
                layer, head = i % shape["layers"], (i // shape["layers"]) % shape["heads"]
                response = http.get(f"{base}/{layer}/{head}", headers=headers, params=params)
                spent.append(float(response.headers["server-timing"].split("dur=")[1]))
            out[f"head_fetch_{name}_ms"] = statistics.median(spent)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(Path(__file__).resolve().parents[1] / "models"))
    parser.add_argument("--model", default="en-fr-transformer")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--text", default=SENTENCE_42)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        only = Path(tmp) / "models"
        only.mkdir()
        (only / args.model).symlink_to(Path(args.models_dir).resolve() / args.model)
        with running_server(only, Path(tmp) / "server.log") as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            runs: dict[str, list[dict[str, float]]] = {"today": [], "on_demand": []}
            for i in range(args.runs + 1):
                for mode in ("today", "on_demand"):
                    result = one_run(page, url, args.model, args.text, inline=mode == "today")
                    if i:  # the first round warms the server and the browser
                        runs[mode].append(result)
            browser.close()
            fetches = fetch_times(url, args.model, args.text, 64)
    words = len(args.text.split())
    print(f"{args.model}, {words} words, median of {args.runs} runs (Chromium, CPU server)")  # noqa: T201
    print("| mode | bytes to first heatmap | requests | first heatmap (ms from Enter) | after the answer (ms) |")  # noqa: T201
    print("| --- | --- | --- | --- | --- |")  # noqa: T201
    for mode, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(  # noqa: T201
            f"| {mode} | {med['bytes']:,.0f} | {med['requests']:.0f} | {med['first_heatmap_ms']:.0f} | {med['after_translation_ms']:.0f} |"
        )
    print(", ".join(f"{k} {v:.2f}" for k, v in fetches.items()))  # noqa: T201


if __name__ == "__main__":
    main()
