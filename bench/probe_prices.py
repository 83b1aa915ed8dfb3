"""Calibrates admission's route prices (``attnscope/engine/route_prices.py``): in-process, one
thread, on a shipped model, the seconds per unit of decode work of large beam decodes (the
scheduler's unit: attention weights computed, priced at the output budget as admission does)
and the seconds per estimated flop of attribution, the lens and patching. Their ratio is
each route's ``flops_per_work``: the table's constant should sit near the lowest seen (a lower
one prices more work, so a price that errs errs towards refusing).

    .venv/bin/python bench/probe_prices.py [--model models/en-de-transformer] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from attnscope.attribution import attribute
from attnscope.config import REPO_ROOT
from attnscope.engine import limits, route_prices
from attnscope.inside.lens import inspect
from attnscope.inside.patching import patch
from attnscope.repository import load_model_folder
from attnscope.translator import Translator

TEXTS = (
    "A man in a blue shirt is riding a bicycle down the street.",
    "Two young children are playing with a ball in the park next to a small lake while their parents watch.",
)


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs (after one warm-up)."""
    fn()
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "en-de-transformer"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_model_folder(args.model)
    translator, config, model = (
        Translator(loaded, max_source_tokens=10_000),
        loaded.config,
        loaded.model,
    )
    # The scheduler learns its rate from decodes of at least RATE_MIN_WORK (8 M): the issue's
    # digit string at beam 8 is one (fixed overhead aside, as there).
    digits = " ".join(str(i % 10) for i in range(95))
    big = translator.source_ids(digits)
    work = limits.attention_floats(config, [len(big)], [150], 8)
    with torch.inference_mode():
        decode_s = timed(
            lambda: translator.translate([digits], beam_size=8, max_length=150), args.repeats
        )
    s_per_work = decode_s / work
    print(f"large decode (S={len(big)}, beam 8, max_length 150): {decode_s:.2f} s, {work / 1e6:.1f} M work, "
          f"{s_per_work:.2e} s/work (the scheduler's prior: 2e-08)")  # fmt: skip
    for text in TEXTS:
        source = translator.source_ids(text)
        with torch.inference_mode():
            (result,) = translator.translate([text], beam_size=1, max_length=3 * len(source))
        target = result.target_ids
        row = [f"S={len(source)} T={len(target)}"]
        shape = route_prices.shape_of(config, len(source), len(target), steps=args.steps)
        jobs = {
            "attribution": lambda s=source, t=target: attribute(model, s, t, steps=args.steps),
            "lens": lambda s=source, t=target: inspect(model, s, t),
            "patching": lambda s=source, t=target: patch(model, s, s, t),
        }
        for name, job in jobs.items():
            price = route_prices.ROUTE_PRICES[name]
            with torch.inference_mode(name != "attribution"):
                seconds = timed(job, args.repeats)
            s_per_flop = seconds / price.flops(shape)
            row.append(f"{name}: {seconds:.3f} s, {price.passes(shape):,} passes, {price.floats(shape) / 1e6:.1f} M floats, "
                       f"flops/work {s_per_work / s_per_flop:.0f}")  # fmt: skip
        print(" | ".join(row), flush=True)
    print(
        "table: "
        + ", ".join(f"{p.name} {p.flops_per_work:g}" for p in route_prices.ROUTE_PRICES.values())
    )


if __name__ == "__main__":
    main()
