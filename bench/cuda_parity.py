"""Check the CUDA path against the CPU: each shipped model translates the same sentences to the
same text with the same attention (within fp32 kernel differences), and time it on both.

    .venv/bin/python bench/cuda_parity.py [--models models] [--beam 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.repository import discover, load_model_folder  # noqa: E402
from attnscope.translator import Translator  # noqa: E402

SENTENCES = [
    "A man is riding a bicycle.",
    "Two dogs play in the snow.",
    "A little girl in a pink dress climbs a tree in the park.",
    "A group of people stand outside a building, waiting for the bus.",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="models")
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    ok = True
    for folder in discover(args.models):
        results = {}
        for device in ("cpu", "cuda"):
            translator = Translator(load_model_folder(folder, device))
            translator.translate(SENTENCES[:1], beam_size=args.beam)  # warm-up
            start = time.perf_counter()
            results[device] = translator.translate(SENTENCES, beam_size=args.beam)
            results[device + "_ms"] = (time.perf_counter() - start) * 1000  # type: ignore[assignment]
        same_text = [a.text == b.text for a, b in zip(results["cpu"], results["cuda"], strict=True)]
        max_diff = 0.0
        for a, b in zip(results["cpu"], results["cuda"], strict=True):
            if a.text == b.text and a.hypothesis.cross is not None:
                max_diff = max(max_diff, float((a.hypothesis.cross - b.hypothesis.cross.cpu()).abs().max()))
        ok &= all(same_text) and max_diff < 1e-3
        print(
            f"{folder.name:24s} same text {sum(same_text)}/{len(same_text)}  max |cross cpu-cuda| {max_diff:.2e}"
            f"  cpu {results['cpu_ms']:.0f} ms  cuda {results['cuda_ms']:.0f} ms (4 sentences, beam {args.beam})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
