"""Attention on demand against today's inline answers, in Chromium against the real server
(``attnscope serve``, CPU): the bytes received (as sent, gzipped where the server gzips) and the
time from pressing Enter to the first heatmap drawn on the Translate page (the first frame
showing one: the canvas first paint, or Plotly's where there is none), and after the
translation's answer arrived, and until Plotly's interactive heatmap is there; then the server time of one head's fetch (``Server-Timing``),
as JSON and as float16 ``.npy``.

"today" sends the page's request without ``"attention": "on_demand"`` (intercepted), so the
same page draws the same first head from the inline answer. Each mode runs ``--runs`` times
(after one warm-up), interleaved; medians are reported.

``--clients 32`` measures the server instead of the page: an imported
6+6-layer Marian (random weights, as bench/hf_import.py builds it) under 32 concurrent clients,
inline against on demand.

    .venv/bin/python bench/on_demand.py [--models-dir models] [--model en-fr-transformer] [--runs 5] [--before DIR]
    .venv/bin/python bench/on_demand.py --clients 32 [--rounds 3] [--tokens 40]
    .venv/bin/python bench/on_demand.py --llm [--llm-dir DIR] --max-length 24 --runs 2 --text "..."

``--llm`` runs the page on a decoder-only LLM of Qwen2-0.5B's shape built here with random
weights (``llm_models``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
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
MARIAN = "en-de-opus-shaped"
LLM = "llm-qwen2-0.5b-shaped"


# Installed in the page before Enter: every time is taken in the page's own clock. The Enter
# key's time; each animation frame, whether a heatmap is on screen (the canvas first paint of
# heatmap-raster.js, or Plotly's) and whether Plotly's is (interactive): the first frame of each.
WATCH = """(plot) => {
  const bench = window.__bench = {};
  document.addEventListener("keydown", (e) => { if (e.key === "Enter" && !bench.enter) bench.enter = performance.now(); }, true);
  const frame = () => {
    const now = performance.now(); // not the frame's start time, which Chrome may date before a long task
    const gd = document.querySelector(plot);
    const raster = gd && gd.querySelector(":scope > canvas.heatmap-raster");
    const plotted = gd && gd.data && gd.data[0] && gd.data[0].z && gd.data[0].z.length > 0 && !raster;
    if (bench.enter && !bench.painted && (raster || plotted)) bench.painted = now;
    if (bench.enter && !bench.interactive && plotted) bench.interactive = now;
    if (!bench.interactive) requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
}"""
# The answer's arrival and the bytes received up to a time, from the page's resource timing.
RECEIVED = """(until) => {
  const ours = performance.getEntriesByType("resource").filter((e) => /\\/api\\/(translate|attention\\/)/.test(e.name));
  const answer = ours.filter((e) => /\\/api\\/translate$/.test(e.name.split("?")[0])).pop();
  const before = ours.filter((e) => e.responseEnd <= until);
  return {answered: answer.responseEnd, bytes: before.reduce((n, e) => n + e.encodedBodySize, 0), requests: before.length};
}"""


def one_run(page: Page, url: str, model: str, text: str, *, inline: bool, max_length: int | None = None) -> dict[str, float]:
    """Translate ``text`` on a fresh Translate page; bytes and times to the first heatmap (the
    first frame showing one) and to Plotly's interactive one, in the page's clock. ``inline``:
    the page's request without ``"attention": "on_demand"``; ``max_length``: added to it (random
    weights never stop on their own)."""

    def asked(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        if inline:
            body.pop("attention", None)
        if max_length:
            body["max_length"] = max_length
        route.continue_(post_data=json.dumps(body))

    page.goto(f"{url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", model)
    page.fill("#beam", "1")
    page.fill("#text", text)
    if inline or max_length:
        page.route("**/api/translate", asked)
    page.evaluate(WATCH, PLOT)
    with page.expect_response("**/api/translate", timeout=600_000) as answered:
        page.press("#text", "Enter")
    if answered.value.status != 200:  # refused (an inline answer over the answer-size limit, say)
        if inline or max_length:
            page.unroute("**/api/translate")
        return {"refused": float(answered.value.status), "detail": answered.value.json().get("detail", "")}  # type: ignore[dict-item]
    page.wait_for_function("() => window.__bench.interactive", timeout=120_000)
    times = page.evaluate("window.__bench")
    got = page.evaluate(RECEIVED, times["painted"])
    if inline or max_length:
        page.unroute("**/api/translate")
    return {
        "bytes": float(got["bytes"]),
        "requests": float(got["requests"]),
        "first_heatmap_ms": times["painted"] - times["enter"],
        "after_translation_ms": times["painted"] - got["answered"],
        "interactive_after_translation_ms": times["interactive"] - got["answered"],
    }


def fetch_times(url: str, model: str, text: str, count: int, max_length: int | None = None) -> dict[str, float]:
    """Median server time (Server-Timing) of one head's fetch, JSON and float16 .npy."""
    with httpx.Client(base_url=url, timeout=600) as http:
        body = {"model": model, "text": text, "beam_size": 1, "attention": "on_demand", "max_length": max_length}
        answer = http.post("/api/translate", json=body).json()
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


def marian_models(tmp: Path) -> Path:
    """A models folder holding one imported 6+6-layer, 512-wide Marian (opus-mt-en-de's shape,
    random weights; bench/hf_import.py's builder), as float32."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hf"))
    from hf_import import opus_shaped_marian

    from attnscope.hf.importer import import_model

    source = opus_shaped_marian(tmp / "source")
    import_model(str(source), tmp / "models" / MARIAN, dtype="float32")
    return tmp / "models"


def llm_models(tmp: Path, *, vocab_from: str = "tests") -> Path:
    """A models folder holding one imported decoder-only LLM of Qwen2-0.5B's shape (24 layers,
    896 wide, 14 query heads sharing 2 key/value heads, feed-forward 4864; random weights,
    float32), with the tests' small byte-level BPE tokenizer (420 pieces) and chat template, so
    only the vocabulary is smaller than the real model's (its 151,936 rows would only be the
    output layer's cost)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "llm"))
    from llm_builders import save_tokenizer

    from attnscope.hf.importer import import_model

    source = tmp / "qwen2-0.5b-shaped"
    tok = save_tokenizer(source)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=4096, rope_theta=1_000_000.0, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    Qwen2ForCausalLM(config).eval().save_pretrained(source)
    import_model(str(source), tmp / "models" / LLM, dtype="float32", pair=("en", "de"))
    return tmp / "models"


def one_client(url: str, body: dict[str, Any], on_demand: bool) -> dict[str, float]:
    """One user: translate, and on demand fetch the head a page shows first (the last layer's
    cross-attention, head 1). Bytes as received (gzipped), times from the request's start."""
    with httpx.Client(base_url=url, timeout=600) as http:
        start = time.perf_counter()
        for _ in range(20):  # a 503 says when to come back
            answer = http.post("/api/translate", json={**body, **({"attention": "on_demand"} if on_demand else {})})
            if answer.status_code != 503:
                break
            time.sleep(float(answer.headers.get("retry-after", "1")))
        answer.raise_for_status()
        translated = time.perf_counter()
        received = answer.num_bytes_downloaded
        if on_demand:
            data = answer.json()
            layers = data["attention_shapes"]["cross"]["layers"]
            head = http.get(f"/api/attention/{data['attention_id']}/cross/{layers - 1}/0")
            head.raise_for_status()
            received += head.num_bytes_downloaded
        drawn = time.perf_counter()
    return {"answer_ms": (translated - start) * 1000, "first_head_ms": (drawn - start) * 1000, "bytes": float(received)}


def rss_mb(pid: int, field: str) -> float:
    """VmRSS or VmHWM (peak) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_load(*, clients: int, rounds: int, tokens: int, text: str, models: Path | None = None) -> None:
    """The imported Marian under ``clients`` concurrent users, inline and on demand (a fresh
    server each, so its peak memory is its own): per-user bytes, times, server peak RSS and the
    attention store's peak. ``models``: a folder already holding the imported Marian."""
    from concurrent.futures import ThreadPoolExecutor

    from attnscope.testing import server_process

    body = {"model": MARIAN, "text": text, "beam_size": 1, "max_length": tokens}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = models or marian_models(Path(tmp))
        for mode in ("inline", "on_demand"):
            # a deadline this slow CPU can meet with every client queued at once
            with server_process(models, Path(tmp) / f"{mode}.log", env={"ATTNSCOPE_REQUEST_TIMEOUT_S": "1200"}) as (url, process):
                one_client(url, body, mode == "on_demand")  # warm-up
                results = []
                users = [(url, body, mode == "on_demand")] * clients
                with ThreadPoolExecutor(clients) as pool:
                    for _ in range(rounds):
                        results += list(pool.map(lambda user: one_client(*user), users))
                store = httpx.get(f"{url}/api/attention").json()
                rows.append((mode, results, rss_mb(process.pid, "VmHWM"), store))
    print(f"{MARIAN} (imported 6+6x512 Marian, random weights), {len(text.split())} words -> {tokens} tokens, greedy; "  # noqa: T201
          f"{clients} concurrent clients x {rounds} rounds (CPU server)")
    print("| mode | bytes per user | answer, median / p95 | first head, median / p95 | server peak RSS | store peak |")  # noqa: T201
    print("| --- | --- | --- | --- | --- | --- |")  # noqa: T201
    def stat(results: list[dict[str, float]], key: str) -> str:
        values = sorted(r[key] for r in results)
        return f"{statistics.median(values):,.0f} / {values[int(0.95 * (len(values) - 1))]:,.0f} ms"

    for mode, results, peak, store in rows:

        held = f"{store['peak_bytes'] / 1e6:,.1f} MB of {store['max_bytes'] / 1e6:,.0f} MB" if mode == "on_demand" else "-"
        print(f"| {mode} | {statistics.median(r['bytes'] for r in results):,.0f} | {stat(results, 'answer_ms')} | "  # noqa: T201
              f"{stat(results, 'first_head_ms')} | {peak:,.0f} MB | {held} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(Path(__file__).resolve().parents[1] / "models"))
    parser.add_argument("--model", default="en-fr-transformer")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--text", default=SENTENCE_42)
    parser.add_argument("--llm", action="store_true", help=f"the page on {LLM} (Qwen2-0.5B's shape, random weights) instead of --model")
    parser.add_argument("--llm-dir", default=None, help=f"with --llm: a models folder already holding {LLM}")
    parser.add_argument("--max-length", type=int, default=None, help="output tokens asked for (random weights never stop)")
    parser.add_argument("--before", default=None, help="another checkout (e.g. `git archive main`) whose server runs interleaved, as rows '(before)'")
    parser.add_argument("--clients", type=int, default=0, help="the imported Marian under this many concurrent clients")
    parser.add_argument("--rounds", type=int, default=3, help="with --clients: rounds of requests after a warm-up")
    parser.add_argument("--tokens", type=int, default=40, help="with --clients: output tokens (random weights never stop)")
    parser.add_argument("--marian-dir", default=None, help=f"with --clients: a models folder already holding {MARIAN} (the import takes minutes)")
    args = parser.parse_args()
    if args.clients:
        marian = Path(args.marian_dir) if args.marian_dir else None
        run_load(clients=args.clients, rounds=args.rounds, tokens=args.tokens, text=args.text, models=marian)
        return
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as servers:
        if args.llm:  # the 0.5B-shaped LLM (built and imported here, minutes), or one built before
            args.model = LLM
            args.models_dir = args.llm_dir or str(llm_models(Path(tmp) / "llm"))
        only = Path(tmp) / "models"
        only.mkdir()
        (only / args.model).symlink_to(Path(args.models_dir).resolve() / args.model)
        urls = {"": servers.enter_context(running_server(only, Path(tmp) / "server.log"))}
        if args.before:  # the same page from another checkout, interleaved with this one's
            urls[" (before)"] = servers.enter_context(running_server(only, Path(tmp) / "before.log", checkout=Path(args.before)))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            runs: dict[str, list[dict[str, float]]] = {f"{m}{tag}": [] for tag in sorted(urls, reverse=True) for m in ("today", "on_demand")}
            for i in range(args.runs + 1):
                for tag, url in urls.items():
                    for mode in ("today", "on_demand"):
                        result = one_run(page, url, args.model, args.text, inline=mode == "today", max_length=args.max_length)
                        if i:  # the first round warms the server and the browser
                            runs[f"{mode}{tag}"].append(result)
            browser.close()
        fetches = fetch_times(urls[""], args.model, args.text, 64, args.max_length)
    words = len(args.text.split())
    print(f"{args.model}, {words} words, median of {args.runs} runs (Chromium, CPU server)")  # noqa: T201
    print("| mode | bytes to first heatmap | requests | first heatmap (ms from Enter) | after the answer (ms) "  # noqa: T201
          "| interactive, after the answer (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")  # noqa: T201
    for mode, results in runs.items():
        if "refused" in results[0]:
            print(f"| {mode} | refused: {results[0]['refused']:.0f} {results[0]['detail']} | | | | |")  # noqa: T201
            continue
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(  # noqa: T201
            f"| {mode} | {med['bytes']:,.0f} | {med['requests']:.0f} | {med['first_heatmap_ms']:.0f} | {med['after_translation_ms']:.0f} "
            f"| {med['interactive_after_translation_ms']:.0f} |"
        )
    print(", ".join(f"{k} {v:.2f}" for k, v in fetches.items()))  # noqa: T201


if __name__ == "__main__":
    main()
