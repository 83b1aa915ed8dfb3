"""Training scenes per second for Show, Attend and Tell: the host-built scenes
(``attnscope.vision.scenes.make_scenes``: a Python layout and caption per example, a paste per
item slot) against the device pool (``attnscope.vision.scene_pool.ScenePool``), interleaved, and
one training step of the shipped captioner beside them for scale.

    .venv/bin/python bench/vision_batches.py [--batch 256] [--runs 5] [--threads 1] [--device cpu]
                                             [--data-dir /usr/share/datasets/fashion-mnist]

Each round times one batch of each way (after a warm-up), ``--runs`` rounds; the median of each
way is printed with the ratio (the two ways alternate, so a busy neighbour slows both alike).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.vision.captioner import caption_loss  # noqa: E402
from attnscope.vision.data import load_items  # noqa: E402
from attnscope.vision.folders import build  # noqa: E402
from attnscope.vision.scene_pool import ScenePool  # noqa: E402
from attnscope.vision.scenes import make_scenes  # noqa: E402
from bench.llm_speed import timed  # noqa: E402  (one call, the device's queue drained before and after)

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    items = load_items("train", args.data_dir).to(device)
    host_gen = torch.Generator().manual_seed(0)
    dev_gen = torch.Generator(device).manual_seed(0)
    start = time.perf_counter()
    pool = ScenePool(items)
    table_s = time.perf_counter() - start
    config = json.loads((ROOT / "models" / "vision-sat-scenes" / "vision.json").read_text())["config"]
    model = build("captioner", config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), 1e-4)

    def step() -> None:
        images, tokens = pool.draw(args.batch, dev_gen)
        nll, reg = caption_loss(model(images, tokens), tokens, model.config.doubly_stochastic)
        optimizer.zero_grad(set_to_none=True)
        (nll + reg).backward()
        optimizer.step()

    ways = {"host make_scenes": lambda: make_scenes(items, args.batch, host_gen),
            "device ScenePool": lambda: pool.draw(args.batch, dev_gen), "training step (pool + model)": step}  # fmt: skip
    for fn in ways.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.runs):
        for name, fn in ways.items():
            times[name].append(timed(fn, device))
    medians = {name: statistics.median(t) for name, t in times.items()}
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {args.threads} thread(s)",
        "batch": args.batch, "runs": args.runs, "layout_table_s": round(table_s, 2),
        "ms_per_batch": {name: round(m * 1000, 2) for name, m in medians.items()},
        "host_over_device": round(medians["host make_scenes"] / medians["device ScenePool"], 2),
    }  # fmt: skip
    print(json.dumps(report, indent=1))  # noqa: T201 - the bench's output


if __name__ == "__main__":
    main()
