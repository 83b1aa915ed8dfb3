"""The vision models behind the API: loaded once, answering glimpse, caption and sample requests.

Every answer is plain JSON-ready data; the models keep no per-request state, so one service
serves concurrent requests (each runs in a worker thread under ``torch.inference_mode``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnscope.vision import folders
from attnscope.vision.captioner import Captioner, beam_search, greedy
from attnscope.vision.data import CANVAS_KINDS, CLASSES, Items, fixed_canvases, load_items
from attnscope.vision.folders import VisionModel
from attnscope.vision.images import ImageError, decode_png, encode_png, to_canvas
from attnscope.vision.ram import RecurrentAttentionModel, to_pixels
from attnscope.vision.scenes import EOS_ID, VOCAB, make_scenes

logger = logging.getLogger(__name__)
DATASETS = ("translated", "cluttered", "scenes")
Admit = Callable[..., None]  # (width, height, *, passes, canvas, beams=0): raises to refuse the request


class BadImage(Exception):
    """The request's image cannot be used: ``status`` 413 (too large) or 422, ``message`` says why."""

    def __init__(self, message: str, status: int) -> None:
        self.message, self.status = message, status
        super().__init__(message)


class UnknownVisionModel(LookupError):
    """No vision model of that id; ``available`` lists the loaded ones (the API answers 404)."""

    def __init__(self, model_id: str, available: list[str]) -> None:
        self.model_id, self.available = model_id, available
        super().__init__(f"unknown vision model {model_id!r}")


class WrongRequest(ValueError):
    """A request this service cannot answer (the other task's model, an unknown data set):
    ``field`` is where it lies as the API names it (("body", "model")), ``message`` says why."""

    def __init__(self, field: tuple[str, str], message: str) -> None:
        self.field, self.message = field, message
        super().__init__(message)


class SamplesUnavailable(RuntimeError):
    """The Fashion-MNIST test files are missing (the message says how to install them)."""


class VisionService:
    def __init__(self, models_dir: str | Path, device: torch.device, data_dir: str | Path | None = None) -> None:
        self.models_dir = Path(models_dir)
        self.device = device
        self.data_dir = data_dir
        self.models: dict[str, VisionModel] = {}
        self.failed: dict[str, str] = {}
        self._test_items: Items | None = None
        self._lock = threading.Lock()

    def load_all(self) -> None:
        for folder in folders.discover(self.models_dir):
            try:
                self.models[folder.name] = folders.load_folder(folder, self.device)
            except (OSError, ValueError) as err:
                logger.error("vision model %s is unavailable: %s", folder.name, err)
                self.failed[folder.name] = str(err)
        logger.info("vision models loaded: %s", ", ".join(self.models) or "none")

    def describe(self) -> list[dict[str, Any]]:
        """What each model is and its card's test numbers, for ``/api/vision/models``."""
        described = []
        for loaded in self.models.values():
            model = loaded.model
            ram = model if isinstance(model, RecurrentAttentionModel) else None
            captioner = model if isinstance(model, Captioner) else None
            described.append({
                "id": loaded.id,
                "kind": loaded.kind,
                "task": "caption" if captioner else "classify",
                "dataset": loaded.dataset,
                "parameters": loaded.num_parameters,
                "canvas": loaded.canvas,
                "glimpses": ram.config.glimpses if ram else None,
                "retina": ram.config.sizes() if ram else None,
                "grid": [captioner.config.grid] * 2 if captioner else None,
                "attention": captioner.config.attention if captioner else ram is not None,
                "test": {k: v for k, v in loaded.card.get("test", {}).items() if k != "samples"},
                "card": loaded.card,
            })
        return described

    def get(self, model_id: str, task: str) -> VisionModel:
        loaded = self.models.get(model_id)
        if loaded is None:
            raise UnknownVisionModel(model_id, list(self.models))
        wanted = "caption" if task == "caption" else "classify"
        if (loaded.kind == "captioner") != (wanted == "caption"):
            doing = "captions scenes" if loaded.kind == "captioner" else "classifies canvases"
            others = [m.id for m in self.models.values() if (m.kind == "captioner") == (wanted == "caption")]
            raise WrongRequest(("body", "model"), f"{model_id} {doing}; for this endpoint use one of: {', '.join(others) or 'none'}")
        return loaded

    @staticmethod
    def _image(value: str, admit: Admit | None = None, **cost: int) -> Any:
        """The request's image as pixels; ``admit`` (an admission check) hears its width and
        height and the ``cost`` arguments (passes, canvas, beams) before the pixels are decoded."""
        check = None if admit is None else (lambda width, height: admit(width, height, **cost))
        try:
            return decode_png(value, check=check)
        except ImageError as err:
            raise BadImage(str(err), err.status) from None

    def glimpses(self, model_id: str, image: str, admit: Admit | None = None) -> dict[str, Any]:
        """Where the RAM looks, in the input's pixels, and its class probabilities after each
        glimpse (following the policy's mean). A full-image CNN answers with no glimpses and one
        row of probabilities: it sees the whole image at once."""
        loaded = self.get(model_id, "classify")
        canvas = loaded.canvas
        passes = loaded.model.config.glimpses if isinstance(loaded.model, RecurrentAttentionModel) else 1
        pixels = self._image(image, admit, passes=passes, canvas=canvas)
        tensor, frame = to_canvas(pixels, canvas)
        glimpses: list[dict[str, Any]] = []
        with torch.inference_mode():
            if isinstance(loaded.model, RecurrentAttentionModel):
                out = loaded.model(tensor.to(self.device), sample=False)
                probs = out.class_log_probs[0].exp().cpu()  # (T, classes)
                centres = to_pixels(out.locations[0].cpu(), canvas)  # (T, 2) canvas pixels
                sizes = [frame.length(s) for s in loaded.model.config.sizes()]
                for t, (x, y) in enumerate(centres.tolist()):
                    ix, iy = frame.to_input(x, y)
                    glimpses.append({"step": t, "x": ix, "y": iy, "scales": sizes})
            else:
                probs = loaded.model(tensor.to(self.device)).exp().cpu()  # (1, classes)
        best = int(probs[-1].argmax())
        return {
            "model": loaded.id,
            "width": pixels.shape[1],
            "height": pixels.shape[0],
            "classes": list(CLASSES),
            "glimpses": glimpses,
            "class_probs": probs.tolist(),
            "prediction": CLASSES[best],
            "probability": float(probs[-1, best]),
        }

    def caption(self, model_id: str, image: str, beam_size: int, admit: Admit | None = None) -> dict[str, Any]:
        """The caption, its tokens (ending in ``</s>`` when the decoder emitted it) and each
        token's attention over the grid, ``[token][row][col]``; uniform without attention."""
        loaded = self.get(model_id, "caption")
        model = loaded.model
        assert isinstance(model, Captioner)
        passes = beam_size * model.config.max_len
        pixels = self._image(image, admit, passes=passes, canvas=model.config.canvas, beams=beam_size)
        tensor, frame = to_canvas(pixels, model.config.canvas)
        with torch.inference_mode():
            if beam_size == 1:
                (ids,), (att,) = greedy(model, tensor.to(self.device))
            else:
                ids, att = beam_search(model, tensor.to(self.device), beam_size)
        tokens = [VOCAB[i] for i in ids]
        words = [VOCAB[i] for i in ids if i != EOS_ID]
        grid = model.config.grid
        return {
            "model": loaded.id,
            "caption": " ".join(words),
            "tokens": tokens,
            "attention": att.cpu().reshape(len(ids), grid, grid).tolist(),
            "grid": [grid, grid],
            "uses_attention": model.config.attention,
            "extent": {"left": frame.left, "top": frame.top, "size": frame.size},
            "width": pixels.shape[1],
            "height": pixels.shape[0],
            "beam_size": beam_size,
        }

    def _test(self) -> Items:
        with self._lock:
            if self._test_items is None:
                try:
                    self._test_items = load_items("test", self.data_dir)
                except (FileNotFoundError, ValueError) as err:
                    raise SamplesUnavailable(str(err)) from None
            return self._test_items

    def samples(self, dataset: str, n: int, seed: int) -> dict[str, Any]:
        """``n`` test-split images of ``dataset`` as PNG data URLs with their labels; the same
        ``seed`` gives the same images."""
        items = self._test()
        out: list[dict[str, Any]] = []
        if dataset == "scenes":
            scenes = make_scenes(items, n, torch.Generator().manual_seed(seed))
            for b in range(n):
                out.append({
                    "image": encode_png(scenes.images[b, 0]),
                    "label": scenes.captions[b],
                    "items": [{"class": CLASSES[p.cls], "row": p.row, "col": p.col} for p in scenes.layouts[b]],
                })
        elif dataset in CANVAS_KINDS:
            generator = torch.Generator().manual_seed(seed)
            index = torch.randint(len(items), (n,), generator=generator)
            chosen = Items(items.images[index], items.labels[index])
            canvases = fixed_canvases(chosen, dataset, seed=seed)
            for b in range(n):
                x, y = canvases.corners[b].tolist()
                out.append({
                    "image": encode_png(canvases.images[b, 0]),
                    "label": CLASSES[int(canvases.labels[b])],
                    "item": {"x": x, "y": y, "size": 28},
                })
        else:  # the schema only lets the three through
            raise WrongRequest(("query", "dataset"), f"choose one of {', '.join(DATASETS)}")
        size = 84 if dataset == "scenes" else 60
        return {"dataset": dataset, "seed": seed, "width": size, "height": size, "samples": out}
