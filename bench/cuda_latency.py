"""Decoding on CUDA: one sentence with every attention matrix (ms), and batch-32 throughput,
against CTranslate2 on the same GPU when its CUDA build is installed (optional).

    python bench/cuda_latency.py [--model models/en-de-transformer] [--data-dir data/multi30k]

Times are wall-clock medians of ``--repeats`` runs after warm-up, with ``torch.cuda.synchronize()``
before each clock read. One sentence: greedy and beam 5 over the first ``--sentences`` test2016
sentences, one at a time (ms per sentence). Batch: the same sentences in batches of 32
(sentences per second). attnscope returns every matrix (encoder self, decoder self, cross; all
layers and heads); CTranslate2 its one averaged cross-attention matrix. Writes the table as JSON
under ``--out``. Needs only torch, sentencepiece and safetensors; ``ctranslate2`` is optional.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attnscope.repository import load_model_folder  # noqa: E402
from bench.peers import Run, attnscope_runner, decode_all, test_sentences, with_env  # noqa: E402


def timed(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median wall-clock seconds of ``fn`` (CUDA synchronised), after one warm-up call."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()
    runs = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def ctranslate2_on(loaded: object, model_dir: Path, out: Path, device: torch.device) -> Run | None:
    """A CTranslate2 runner on ``device``, or None (with the reason printed) when unavailable."""
    try:
        import ctranslate2
    except ImportError:
        print("ctranslate2 is not installed: CTranslate2 columns skipped")
        return None
    if device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        print("this ctranslate2 has no CUDA device: CTranslate2 columns skipped")
        return None
    from bench.peers import to_ctranslate2

    path = out / f"ct2-{model_dir.name}"
    if not (path / "model.bin").exists():
        to_ctranslate2(loaded, path)  # type: ignore[arg-type]
    translator = ctranslate2.Translator(
        str(path), device=device.type, compute_type="float32", intra_threads=1, inter_threads=1
    )
    sp, eos = loaded.tokenizer.sp, loaded.config.eos_id  # type: ignore[attr-defined]

    def run(sources: list[list[int]], beam: int) -> list[list[int]]:
        tokens = [[sp.id_to_piece(i) for i in s] for s in sources]
        results = translator.translate_batch(
            tokens, beam_size=beam, return_attention=True, max_batch_size=len(sources)
        )
        outs = [[sp.piece_to_id(t) for t in r.hypotheses[0]] for r in results]
        return [o[: o.index(eos)] if eos in o else o for o in outs]

    return run


def with_graphs(run: Run, on: bool) -> Run:
    """``run`` with ``ATTNSCOPE_CUDA_GRAPHS`` set to 1 or 0 around each call."""
    return with_env(run, "ATTNSCOPE_CUDA_GRAPHS", "1" if on else "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/en-de-transformer")
    parser.add_argument("--data-dir", default="data/multi30k")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="out/cuda-latency")
    parser.add_argument("--device", default="cuda", help="cuda (the point); cpu only to check the script")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench/cuda_latency.py: no CUDA device")
    torch.set_num_threads(1)  # the GPU does the work; on the CPU (a check) threads only contend
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_model_folder(args.model, device=device)
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    sources = test_sentences(loaded, Path(args.data_dir), args.sentences)
    systems: dict[str, Run] = {"attnscope (all attention)": with_graphs(attnscope_runner(loaded.model, True), False)}
    systems["attnscope (no attention)"] = with_graphs(attnscope_runner(loaded.model, need_weights=False), False)
    graphs = with_graphs(attnscope_runner(loaded.model, need_weights=True), True)
    if device.type == "cuda":  # steps replayed as CUDA graphs (attnscope/decoding/static_greedy.py, static_beam.py)
        plain = systems["attnscope (all attention)"]
        for beam in (1, 5):
            for batch in (1, 32):
                pairs = zip(decode_all(graphs, sources, beam, batch), decode_all(plain, sources, beam, batch), strict=True)
                same = sum(a == b for a, b in pairs)
                print(f"CUDA graphs: beam {beam}, batch {batch}: output identical on {same}/{len(sources)} sentences")
        systems["attnscope (all attention), CUDA graphs"] = graphs
    ct2 = ctranslate2_on(loaded, Path(args.model), out, device)
    if ct2 is not None:
        systems["CTranslate2 fp32"] = ct2

    results: dict[str, dict[str, float]] = {}
    print(f"{args.model} on {hardware}, {len(sources)} test2016 sentences\n")
    print("| system | greedy, 1 sentence (ms) | beam 5, 1 sentence (ms) | greedy, batch 32 (sent/s) | beam 5, batch 32 (sent/s) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, run in systems.items():
        row: dict[str, float] = {}
        for beam in (1, 5):
            one = timed(lambda run=run, beam=beam: decode_all(run, sources, beam, 1), args.repeats, device)
            row[f"beam{beam} one sentence ms"] = one * 1000 / len(sources)
            batch = timed(lambda run=run, beam=beam: decode_all(run, sources, beam, 32), args.repeats, device)
            row[f"beam{beam} batch32 sentences/s"] = len(sources) / batch
        results[name] = row
        print(
            f"| {name} | {row['beam1 one sentence ms']:.2f} | {row['beam5 one sentence ms']:.2f} | "
            f"{row['beam1 batch32 sentences/s']:.1f} | {row['beam5 batch32 sentences/s']:.1f} |"
        )
    record = {"model": args.model, "device": hardware, "torch": torch.__version__, "results": results}
    (out / "cuda_latency.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
