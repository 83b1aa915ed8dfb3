"""What the native operations (attnscope/nn/native) win, in one process: the same decodes with them
and through the Python step (``ATTNSCOPE_NATIVE=0``), alternating, median ms per sentence.

    .venv/bin/python bench/native_ab.py [--rounds 7] [--threads 1]

Float models as shipped (fp32 on packed fp16 weights) and the en-de Transformer in int8: greedy
and beam 5, one sentence at a time. The outputs are checked equal (float: the same bits; int8:
the same tokens)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from attnscope.nn import native
from attnscope.repository import load_model_folder
from attnscope.translator import Translator

MODELS = Path(__file__).resolve().parents[1] / "models"
SENTENCES = [
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two dogs play in the snow.",
    "A little girl climbs a tree in the park.",
    "The man in the red shirt is cooking dinner for his family.",
]


def timed(translator: Translator, beam: int) -> tuple[float, list[str]]:
    """Median ms per sentence over SENTENCES, one at a time, and the translations."""
    times, outputs = [], []
    for text in SENTENCES:
        started = time.perf_counter()
        (out,) = translator.translate([text], beam_size=beam)
        times.append((time.perf_counter() - started) * 1000)
        outputs.append(out.text)
    return statistics.median(times), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    assert native.ops() is not None, "no native build: run `attnscope build-native` first"
    cases = [("en-de-transformer", None), ("en-de-transformer", "int8"), ("en-de-rnn-additive", None)]
    for name, quantize in cases:
        translator = Translator(load_model_folder(MODELS / name, quantize=quantize))
        for beam in (1, 5):
            results: dict[str, list[float]] = {"native": [], "python": []}
            outputs: dict[str, list[str]] = {}
            for _ in range(args.rounds):
                for label, switch in (("native", "1"), ("python", "0")):
                    os.environ["ATTNSCOPE_NATIVE"] = switch
                    ms, outputs[label] = timed(translator, beam)
                    results[label].append(ms)
            os.environ["ATTNSCOPE_NATIVE"] = "1"
            fast, slow = statistics.median(results["native"]), statistics.median(results["python"])
            same = "same outputs" if outputs["native"] == outputs["python"] else "OUTPUTS DIFFER"
            print(f"{name:20} {quantize or 'fp32':5} beam {beam}: native {fast:6.1f} ms, Python step {slow:6.1f} ms "
                  f"({slow / fast:.2f}x), {same}")


if __name__ == "__main__":
    main()
