"""``attnscope vision-train`` and ``attnscope vision-evaluate``: the vision models' commands.

    attnscope vision-train --model ram --dataset cluttered --out models/vision-ram-cluttered
    attnscope vision-train --model full-image-cnn --dataset cluttered --out ...   # width matched
    attnscope vision-train --model captioner --out models/vision-sat-scenes
    attnscope vision-train --model captioner --no-attention --out models/vision-captioner-noattn
    attnscope vision-evaluate models/vision-ram-cluttered [--update-card]
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

logger = logging.getLogger("attnscope")


def _set(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set expects FIELD=VALUE, got {item!r}")
    try:
        return key, json.loads(text)
    except json.JSONDecodeError:
        return key, text


def add_commands(sub: Any) -> None:
    """Add the vision subcommands to the ``attnscope`` parser's subparsers."""
    train = sub.add_parser("vision-train", help="train a vision model (RAM, full-image CNN, captioner) on Fashion-MNIST")
    train.add_argument("--model", choices=["ram", "full-image-cnn", "captioner"], required=True)
    train.add_argument("--dataset", choices=["translated", "cluttered", "scenes"], default=None,
                       help="canvases for the classifiers (default translated), scenes for the captioner")
    train.add_argument("--no-attention", action="store_true", help="captioner without attention (uniform context)")
    train.add_argument("--out", required=True, help="model folder to write")
    train.add_argument("--data-dir", default=None,
                       help="Fashion-MNIST IDX files (default $ATTNSCOPE_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)")
    train.add_argument("--device", default=None)
    train.add_argument("--steps", type=int, default=None)
    train.add_argument("--max-time", type=float, dest="max_time_s", default=None, help="training budget in seconds")
    train.add_argument("--batch", type=int, default=None)
    train.add_argument("--lr", type=float, default=None)
    train.add_argument("--eval-every", type=int, default=None)
    train.add_argument("--val-examples", type=int, default=None)
    train.add_argument("--test-examples", type=int, default=None, help="test canvases (default: all 10,000)")
    train.add_argument("--test-scenes", type=int, default=None)
    train.add_argument("--beam", type=int, dest="beam_size", default=None, help="captioners' test beam")
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    train.add_argument("--set", type=_set, action="append", default=[], metavar="FIELD=VALUE",
                       help="override a model config field, e.g. --set glimpses=6")
    train.add_argument("--init", default=None, metavar="FOLDER",
                       help="continue from this model folder's weights (same kind and dataset); its numbers go to the card's history")
    train.add_argument("--quiet", action="store_true", help="no progress bar")

    ev = sub.add_parser("vision-evaluate", help="test metrics of a vision model folder")
    ev.add_argument("model", help="a vision model folder, or its id")
    ev.add_argument("--data-dir", default=None)
    ev.add_argument("--device", default=None)
    ev.add_argument("--beam", type=int, default=3)
    ev.add_argument("--test-examples", type=int, default=None, help="test canvases (default: all 10,000)")
    ev.add_argument("--test-scenes", type=int, default=2000, help="test scenes (seed 0)")
    ev.add_argument("--update-card", action="store_true", help="write the results into card.json")


def run(args: argparse.Namespace) -> int:
    import torch

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    if args.command == "vision-train":
        return _train(args)
    return _evaluate(args)


def _train(args: argparse.Namespace) -> int:
    from attnscope.vision.train import TrainSettings, train

    dataset = args.dataset or ("scenes" if args.model == "captioner" else "translated")
    overrides = dict(args.set)
    if args.no_attention:
        if args.model != "captioner":
            raise ValueError("--no-attention applies to --model captioner only")
        overrides["attention"] = False
    fields = {name: getattr(args, name) for name in (
        "steps", "max_time_s", "batch", "lr", "eval_every", "val_examples", "test_examples",
        "test_scenes", "beam_size", "seed", "init") if getattr(args, name) is not None}
    for name, value in fields.items():
        if name not in ("max_time_s", "test_examples") and value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
    card = train(args.model, dataset, out_dir=args.out, settings=TrainSettings(**fields), overrides=overrides,
                 data_dir=args.data_dir, device=args.device, progress=not args.quiet)
    logger.info("wrote %s: %s", args.out, json.dumps({k: v for k, v in card["test"].items() if k != "samples"}))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from attnscope.device import resolve_device
    from attnscope.vision import folders
    from attnscope.vision.data import load_items
    from attnscope.vision.train import TrainSettings, evaluate_test

    device = resolve_device(args.device)
    loaded = folders.load_folder(args.model, device)
    items = load_items("test", args.data_dir).to(device)
    if args.beam < 1 or args.test_scenes < 1 or (args.test_examples is not None and args.test_examples < 1):
        raise ValueError("--beam, --test-scenes and --test-examples must be positive")
    settings = TrainSettings(beam_size=args.beam, test_examples=args.test_examples, test_scenes=args.test_scenes)
    result = evaluate_test(loaded.model, loaded.dataset, items, settings)
    print(json.dumps(result, indent=2))  # noqa: T201 - the command's output
    if args.update_card:
        card = dict(loaded.card)
        same_beam = loaded.kind != "captioner" or card.get("test", {}).get("beam_size", args.beam) == args.beam
        if same_beam:
            card["test"] = result
        else:  # keep the card's main numbers; other beams go beside them
            card["test_by_beam"] = {**card.get("test_by_beam", {}), str(args.beam): result}
        folders.write_card(loaded.path, card)
    return 0
