"""Where one request's time goes on a GPU, in process (no HTTP): ``attnscope.load(...).translate``
(the engine's whole path: admission, batching slot, decode, answer building with every matrix)
with every matrix in the answer and with ``"attention": "on_demand"`` (every matrix kept, none
sent), greedy and beam 5: what answer building costs beside the decode.

    python bench/served_profile.py --model gpu/models/en-de-transformer [--device cuda] [--requests 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnscope  # noqa: E402
from bench.cuda_parity import SENTENCES  # noqa: E402


def median_ms(fn: object, requests: int, device: torch.device) -> float:
    times = []
    for i in range(requests):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(SENTENCES[i % len(SENTENCES)])  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpu/models/en-de-transformer")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = attnscope.load(args.model, device=args.device)
    for beam in (1, 5):
        for attention in (None, "on_demand"):
            extra = {} if attention is None else {"attention": attention}

            def call(text: str, beam: int = beam, extra: dict = extra) -> object:
                return model.translate(text, beam_size=beam, max_length=40, **extra)

            median_ms(call, 5, device)  # warm-up (graphs captured)
            print(f"beam {beam}, attention {attention or 'inline (every matrix)'}: {median_ms(call, args.requests, device):.2f} ms", flush=True)

if __name__ == "__main__":
    main()
