"""Training of the vision models: the RAM and its full-image baseline on translated or
cluttered canvases, and the captioners (with and without attention) on scenes.

Training draws fresh random canvases/scenes every step from the first 55,000 items of the
train split; the last 5,000 train items give a fixed validation set (the best validation score
picks the saved weights); the test split is used only for the card's final numbers. Adam with a
cosine decay over the step or time budget (whichever ends first), gradient clipping at 5."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from attnscope.device import resolve_device
from attnscope.vision import folders
from attnscope.vision.baseline import BaselineConfig, FullImageCNN, matched_config
from attnscope.vision.captioner import Captioner, CaptionerConfig, caption_loss
from attnscope.vision.data import CANVAS_KINDS, Items, fixed_canvases, load_items, make_canvases
from attnscope.vision.evaluate import caption_metrics, classifier_accuracy
from attnscope.vision.ram import RAMConfig, RecurrentAttentionModel, ram_losses
from attnscope.vision.scene_pool import ScenePool
from attnscope.vision.scenes import make_scenes

logger = logging.getLogger(__name__)
VALIDATION_ITEMS = 5000
Best = tuple[float, dict[str, torch.Tensor]]  # (validation score, a copy of the weights)


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 20_000
    batch: int = 128
    lr: float = 1e-3
    max_time_s: float | None = None
    eval_every: int = 500
    val_examples: int = 2000
    test_examples: int | None = None  # None: the whole test split (10,000 canvases)
    test_scenes: int = 2000
    beam_size: int = 1  # captioners: test beam (1, greedy, is batched and fast; vision-evaluate --beam 3 for more)
    seed: int = 0
    init: str | None = None  # a model folder to continue from (same kind and dataset)


def split_train(items: Items) -> tuple[Items, Items]:
    """(training items, validation items): the last 5,000 (or a tenth, for tiny data) held out."""
    held = min(VALIDATION_ITEMS, max(1, len(items) // 10))
    return Items(items.images[:-held], items.labels[:-held]), Items(items.images[-held:], items.labels[-held:])


def build_model(kind: str, dataset: str, overrides: dict[str, Any]) -> nn.Module:
    """A fresh model; the baseline's width matches the RAM built from the same ``overrides``
    unless ``width`` is given."""
    if kind == "ram":
        return RecurrentAttentionModel(RAMConfig(**overrides))
    if kind == "full-image-cnn":
        if "width" in overrides:
            return FullImageCNN(BaselineConfig(**overrides))
        canvas = int(overrides.get("canvas", RAMConfig.canvas))
        ram = RecurrentAttentionModel(RAMConfig(**{k: v for k, v in overrides.items() if k != "width"}))
        return FullImageCNN(matched_config(ram.num_parameters, canvas=canvas))
    if kind == "captioner":
        fields = {"attention": True, **overrides}
        if "channels" in fields:
            fields["channels"] = tuple(fields["channels"])
        return Captioner(CaptionerConfig(**fields))
    raise ValueError(f"unknown model kind {kind!r}; choose ram, full-image-cnn or captioner")


def _lr_scale(step: int, elapsed: float, settings: TrainSettings) -> float:
    progress = step / settings.steps
    if settings.max_time_s:
        progress = max(progress, elapsed / settings.max_time_s)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def train(
    kind: str,
    dataset: str,
    *,
    out_dir: str | Path,
    settings: TrainSettings,
    overrides: dict[str, Any] | None = None,
    data_dir: str | Path | None = None,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train one model, write its folder to ``out_dir`` and return its card; ``settings.init``
    continues a folder (its weights and configuration; the optimiser starts afresh)."""
    if (kind == "captioner") != (dataset == "scenes"):
        raise ValueError(f"{kind} does not train on {dataset}: captioners train on scenes, classifiers on "
                         f"{' or '.join(CANVAS_KINDS)}")
    if dataset not in (*CANVAS_KINDS, "scenes"):
        raise ValueError(f"unknown dataset {dataset!r}")
    dev = resolve_device(device)
    torch.manual_seed(settings.seed)
    start_from = _start_from(settings.init, kind, dataset, overrides) if settings.init else None
    model = (start_from.model if start_from else build_model(kind, dataset, overrides or {})).to(dev)
    train_items, val_set, test_items, generator = _data(model, dataset, data_dir, dev, settings)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    curve: list[dict[str, Any]] = []
    best: Best | None = None
    start = time.monotonic()
    running: dict[str, torch.Tensor] = {}  # summed on the device: no sync per step
    bar = tqdm(total=settings.steps, disable=not progress, desc=Path(out_dir).name, mininterval=5)
    step = since = 0
    while step < settings.steps:
        elapsed = time.monotonic() - start
        if settings.max_time_s and elapsed > settings.max_time_s:
            logger.info("time budget of %.0f s reached after %d steps", settings.max_time_s, step)
            break
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * _lr_scale(step, elapsed, settings)
        model.train()
        losses = _loss(model, dataset, train_items, settings.batch, generator)
        optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        for name, value in losses.items():
            running[name] = running[name] + value.detach() if name in running else value.detach().clone()
        step += 1
        since += 1
        bar.update()
        if step % settings.eval_every == 0 or step == settings.steps:
            score, point = _validate(model, val_set, since, running, step, start)
            running, since = {}, 0
            curve.append(point)
            bar.set_postfix(val=f"{score:.4f}")
            best = _better(best, score, model)
    bar.close()
    if since:  # stopped by the time budget between two validations
        score, point = _validate(model, val_set, since, running, step, start)
        curve.append(point)
        best = _better(best, score, model)
    if best is not None:
        model.load_state_dict(best[1])
    train_time = time.monotonic() - start
    test = evaluate_test(model, dataset, test_items, settings)
    card: dict[str, Any] = {
        "kind": folders.config_of(model)[0],
        "dataset": dataset,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": {"steps": step, "time_s": round(train_time, 1), "device": str(dev),
                     "hardware": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU",
                     "validation": f"{len(val_set.labels) if dataset != 'scenes' else len(val_set.captions)} "
                                   "examples from the last train items, held out"},
        "hyperparameters": asdict(settings),
        "curve": curve,
        "test": test,
    }
    if start_from:  # continued: the earlier runs' numbers kept
        _record_continuation(card, start_from.card)
    folders.save_folder(out_dir, model.cpu(), dataset=dataset, card=card)
    logger.info("wrote %s (test: %s)", out_dir, {k: v for k, v in test.items() if k != "samples"})
    return card


def _record_continuation(card: dict[str, Any], earlier: dict[str, Any]) -> None:
    """Into ``card``: the earlier card's numbers in ``history``, its steps in
    ``training.steps_before`` and one curve over all the runs."""
    card["history"] = [*earlier.get("history", []),
                       {k: earlier[k] for k in ("training", "hyperparameters", "test", "note") if k in earlier}]
    card["training"]["steps_before"] = before = sum(
        int((h.get("training") or {}).get("steps", 0)) for h in card["history"])
    card["curve"] = continued_curve(earlier.get("curve", []), card["curve"], before)


def continued_curve(earlier: list[dict[str, Any]], curve: list[dict[str, Any]], before: int) -> list[dict[str, Any]]:
    """One curve over all the runs: the earlier card's points, then this run's with its steps
    counted on from ``before`` (the earlier runs' steps) and ``run`` its place in the chain."""
    run = 1 + max((int(p.get("run", 0)) for p in earlier), default=0)
    return [*earlier, *({**p, "step": p["step"] + before, "run": run} for p in curve)]


def _start_from(init: str | Path, kind: str, dataset: str, overrides: dict[str, Any] | None) -> folders.VisionModel:
    """The folder to continue from, checked: same kind and dataset, no overrides."""
    loaded = folders.load_folder(init)
    if loaded.dataset != dataset:
        raise ValueError(f"--init {init}: that model was trained on {loaded.dataset}, not {dataset}")
    if loaded.kind != kind:
        raise ValueError(f"--init {init}: that folder holds a {loaded.kind} model, not {kind}")
    if overrides:
        raise ValueError("--init continues the folder's own configuration; --set does not apply")
    loaded.model.float()
    return loaded


def _data(
    model: nn.Module, dataset: str, data_dir: str | Path | None, dev: torch.device, settings: TrainSettings
) -> tuple[Items | ScenePool, Any, Items, torch.Generator]:
    """(training items, or for scenes their device pool; the fixed validation set, test items,
    the training draws' generator), the items on ``dev``."""
    train_items, val_items = split_train(load_items("train", data_dir))
    train_items, val_items = train_items.to(dev), val_items.to(dev)
    test_items = load_items("test", data_dir).to(dev)
    # Training canvases and scenes are drawn with a generator on the training device (no
    # host-device copies, so the GPU never waits on the CPU; scenes from the layout table of
    # attnscope.vision.scene_pool); the fixed validation and test scenes keep make_scenes.
    generator = torch.Generator(dev).manual_seed(settings.seed)
    if dataset == "scenes":
        val_set: Any = make_scenes(val_items, settings.val_examples, torch.Generator().manual_seed(1))
        return ScenePool(train_items), val_set, test_items, generator
    val_set = fixed_canvases(val_items, dataset, n=settings.val_examples, seed=1, size=_canvas(model))
    return train_items, val_set, test_items, generator


def _better(best: Best | None, score: float, model: nn.Module) -> Best:
    """``best``, or ``model``'s weights if ``score`` beats it."""
    if best is None or score > best[0]:
        return score, {k: v.detach().clone() for k, v in model.state_dict().items()}
    return best


def _canvas(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    return int(getattr(config, "canvas", 60))


def _loss(model: nn.Module, dataset: str, items: Items | ScenePool, batch: int, generator: torch.Generator
          ) -> dict[str, torch.Tensor]:  # fmt: skip
    if isinstance(items, ScenePool):
        assert isinstance(model, Captioner)
        images, tokens = items.draw(batch, generator)
        nll, reg = caption_loss(model(images, tokens), tokens, model.config.doubly_stochastic)
        return {"loss": nll + reg, "nll": nll.detach(), "doubly_stochastic": reg.detach()}
    assert isinstance(items, Items)
    index = torch.randint(len(items), (batch,), generator=generator, device=generator.device)
    canvases = make_canvases(items, index, size=_canvas(model), clutter=CANVAS_KINDS[dataset], generator=generator)
    if isinstance(model, RecurrentAttentionModel):
        parts = ram_losses(model(canvases.images), canvases.labels)
        return {"loss": parts.total, "nll": parts.classification.detach(), "reinforce": parts.reinforce.detach(),
                "baseline_mse": parts.baseline.detach(), "reward": parts.reward.mean().detach()}
    nll = F.nll_loss(model(canvases.images), canvases.labels)
    return {"loss": nll, "nll": nll.detach()}


def _validate(model: nn.Module, val_set: Any, steps: int, running: dict[str, torch.Tensor], step: int,
              start: float) -> tuple[float, dict[str, Any]]:
    """(score to maximise, curve point with the mean training losses since the last point)."""
    point: dict[str, Any] = {"step": step, "time_s": round(time.monotonic() - start, 1)}
    point.update({f"train_{k}": float(v) / max(steps, 1) for k, v in running.items()})
    if isinstance(model, Captioner):
        metrics = caption_metrics(model, val_set, beam_size=1)
        point.update(val_bleu=metrics["bleu"], val_exact_match=metrics["exact_match"],
                     val_attention_in_cell=metrics["attention_in_cell"])
        return metrics["exact_match"] + metrics["bleu"] / 1000, point
    metrics = classifier_accuracy(model, val_set)
    point["val_accuracy"] = metrics["accuracy"]
    return metrics["accuracy"], point


def evaluate_test(model: nn.Module, dataset: str, test_items: Items, settings: TrainSettings) -> dict[str, Any]:
    """The card's test numbers: accuracy on the test split's canvases (seed 0), or caption
    metrics on test scenes (seed 0) with beam ``settings.beam_size``."""
    if isinstance(model, Captioner):
        scenes = make_scenes(test_items, settings.test_scenes, torch.Generator().manual_seed(0))
        return {"split": "test", **caption_metrics(model, scenes, beam_size=settings.beam_size)}
    canvases = fixed_canvases(test_items, dataset, n=settings.test_examples, seed=0, size=_canvas(model))
    return {"split": "test", **classifier_accuracy(model, canvases)}
