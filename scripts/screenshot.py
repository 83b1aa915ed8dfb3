"""docs/screenshot.png: the Translate page after a translation, in headless Chromium, against a
server that is already running (``make serve``).

    .venv/bin/python scripts/screenshot.py [--url http://127.0.0.1:8000] [--out docs/screenshot.png]

The picture is reduced to a 256-colour palette, which keeps it small for the README."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

from PIL import Image
from playwright.sync_api import FloatRect, sync_playwright

SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "screenshot.png")
    parser.add_argument("--model", default="en-de-transformer")
    parser.add_argument("--height", type=int, default=2400, help="at most this many pixels of the page")
    parser.add_argument("--width", type=int, default=960, help="the picture's width (scaled down from 1280)")
    args = parser.parse_args()
    chromium = os.environ.get("ATTNSCOPE_CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{args.url}/?text=")
        page.wait_for_selector("body[data-ready=true]")
        page.select_option("#model", args.model)
        page.fill("#text", SENTENCE)
        with page.expect_response("**/api/translate"):
            page.press("#text", "Enter")
        page.wait_for_function(
            "() => { const gd = document.querySelector('#explorer [data-role=plot-main]');"
            " return gd && gd.data && gd.data.length > 0 }"
        )
        page.wait_for_timeout(800)  # Plotly's transitions
        plot = page.eval_on_selector(
            "#explorer [data-role=plot-main]", "el => el.getBoundingClientRect().bottom + window.scrollY"
        )
        clip: FloatRect = {"x": 0, "y": 0, "width": 1280, "height": min(args.height, plot + 16)}
        shot = page.screenshot(full_page=True, clip=clip)  # the sentence, its translation, the heatmap
        browser.close()
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    image = image.resize((args.width, round(image.height * args.width / image.width)), Image.Resampling.LANCZOS)
    image = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(args.out, optimize=True)
    print(f"{args.out}: {image.width}x{image.height}, {args.out.stat().st_size // 1024} KiB")  # noqa: T201


if __name__ == "__main__":
    main()
