"""The vision models in Python: ``attnscope.load("vision-ram-cluttered").classify(image)`` and
``attnscope.load("vision-sat-scenes").caption(image)``, in process or through ``Client``, answered
as ``POST /api/vision/glimpses`` and ``/caption`` answer (the same :class:`VisionService` code, the
same request schemas, limits and errors), with the glimpses and attention as numpy arrays.

An image is a numpy array (``(H, W)`` floats in [0, 1], or ``uint8`` gray, RGB or RGBA), a PIL
image, a :class:`~pathlib.Path` or ``bytes`` of a PNG or JPEG, or the API's own base64 / data URL
string; light items on black, as the models were trained."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import numpy as np

from attnscope.api.answer import JsonAnswer
from attnscope.api.errors import ModelNotFound, entry, for_status, unprocessable

__all__ = ["CaptionResult", "GlimpseResult", "LocalVisionModel", "RemoteVisionModel", "image_data"]


def image_data(image: Any) -> str:
    """``image`` as the API's ``image`` field: a ``data:image/png;base64,...`` URL (arrays and
    PIL images are written as PNG here) or the base64 of the file's bytes."""
    if isinstance(image, str):
        if image.startswith("data:") or len(image) > 4096 or not _is_file(image):
            return image  # the API's base64 or data URL, checked by the model's side
        image = Path(image)
    if isinstance(image, Path):
        image = image.read_bytes()
    if isinstance(image, bytes | bytearray):
        return base64.b64encode(bytes(image)).decode("ascii")
    if hasattr(image, "detach"):  # a torch tensor
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        from PIL import Image

        array = np.squeeze(image)
        if array.dtype != np.uint8:
            array = np.clip(np.rint(array.astype(np.float64) * 255), 0, 255).astype(np.uint8)
        image = Image.fromarray(array)
    if hasattr(image, "save"):  # a PIL image
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    raise TypeError(f"an image is a numpy array, a PIL image, a Path, bytes or a base64 string, not {type(image).__name__}")


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except OSError:  # a name the system refuses (too long, a NUL)
        return False


class GlimpseResult(JsonAnswer):
    """A classifier's answer: where the Recurrent Attention Model looked and what it thought."""

    @property
    def prediction(self) -> str:
        return str(self._answer["prediction"])

    @property
    def probability(self) -> float:
        return float(self._answer["probability"])

    @property
    def classes(self) -> list[str]:
        return list(self._answer["classes"])

    @property
    def class_probs(self) -> np.ndarray:
        """``[step, class]`` the class probabilities after each glimpse (one row for the CNN)."""
        return np.asarray(self._answer["class_probs"], dtype=np.float64)

    @property
    def glimpses(self) -> np.ndarray:
        """``[step, 2]`` each glimpse's centre ``(x, y)`` in the input image's pixels (no rows
        for the full-image CNN)."""
        return np.asarray([[g["x"], g["y"]] for g in self._answer["glimpses"]], dtype=np.float64).reshape(-1, 2)

    @property
    def scales(self) -> np.ndarray:
        """``[step, patch]`` the side of each retina patch, input pixels, smallest first."""
        found = [g["scales"] for g in self._answer["glimpses"]]
        return np.asarray(found, dtype=np.float64).reshape(len(found), -1)

    def __repr__(self) -> str:
        return f"<GlimpseResult {self.model}: {self.prediction} ({self.probability:.2f}) after {len(self._answer['glimpses'])} glimpses>"


class CaptionResult(JsonAnswer):
    """A captioner's answer: the words and where each looked on the image grid."""

    @property
    def caption(self) -> str:
        return str(self._answer["caption"])

    text = caption

    @property
    def tokens(self) -> list[str]:
        return list(self._answer["tokens"])

    @property
    def attention(self) -> np.ndarray:
        """``[token, row, col]`` each token's attention over the grid (each sums to 1)."""
        return np.asarray(self._answer["attention"], dtype=np.float64)

    @property
    def extent(self) -> dict[str, float]:
        """The square of the input the grid covers: ``left``, ``top``, ``size`` (pixels)."""
        return dict(self._answer["extent"])

    def __repr__(self) -> str:
        return f"<CaptionResult {self.model}: {self.caption!r}>"


class LocalVisionModel:
    """A vision model folder loaded in this process (``attnscope.load`` of a folder with a
    vision.json): ``classify`` for the RAM and the CNN, ``caption`` for the captioners."""

    def __init__(self, folder: Path, settings: Any) -> None:
        from attnscope.device import resolve_device
        from attnscope.vision import folders
        from attnscope.vision.service import VisionService

        self.settings = settings
        self._service = VisionService(folder.parent, resolve_device(settings.device))
        self._service.models[folder.name] = folders.load_folder(folder, self._service.device)
        self.id = folder.name
        (self.info,) = self._service.describe()

    @property
    def device(self) -> str:
        return str(self._service.device)

    def classify(self, image: Any) -> GlimpseResult:
        """``POST /api/vision/glimpses``: the glimpse path and the class probabilities after each."""
        sent = {"model": self.id, "image": image_data(image)}
        body = _validate("glimpses", sent)
        return GlimpseResult(self._call(lambda admit: self._service.glimpses(body.model, body.image, admit)), _short(sent))

    def caption(self, image: Any, *, beam_size: int = 1) -> CaptionResult:
        """``POST /api/vision/caption``: the caption and each token's attention over the grid."""
        sent = {"model": self.id, "image": image_data(image), "beam_size": beam_size}
        body = _validate("caption", sent)
        return CaptionResult(self._call(lambda admit: self._service.caption(body.model, body.image, body.beam_size, admit)), _short(sent))

    def _call(self, fn: Any) -> dict[str, Any]:
        """``fn(admit)`` with the route's admission check, its errors raised as the route's."""
        from attnscope.api.errors import from_engine
        from attnscope.engine import limits
        from attnscope.vision.service import BadImage, UnknownVisionModel, WrongRequest

        try:
            answer: dict[str, Any] = fn(lambda *args, **kwargs: limits.admit_vision(self.settings, *args, **kwargs))
            return answer
        except BadImage as err:
            if err.status == 413:
                raise for_status(413, {"detail": err.message}) from None
            raise unprocessable([entry(("body", "image"), err.message, "image_invalid")]) from None
        except UnknownVisionModel as err:
            raise ModelNotFound(str(err), {"detail": str(err), "available": err.available}) from None
        except WrongRequest as err:  # the server lists its other models of the task; here: the method
            other = "classify()" if self.info["task"] == "classify" else "caption()"
            message = f"{err.message.partition(';')[0]}; call {other} on it"
            raise unprocessable([entry(err.field, message, "value_error")]) from None
        except Exception as err:  # noqa: BLE001 - the engine's own errors as the API's
            converted = from_engine(err)
            if converted is err:
                raise
            raise converted from None

    def close(self) -> None:
        """Nothing to stop: the vision service has no threads (for symmetry with LocalModel)."""

    def __repr__(self) -> str:
        return f"<LocalVisionModel {self.id} ({self.info['task']}) on {self.device}>"


class RemoteVisionModel:
    """A vision model on a server: the methods of :class:`LocalVisionModel`."""

    def __init__(self, client: Any, model_id: str, info: dict[str, Any]) -> None:
        self._client = client
        self.id = model_id
        self.info = info

    def classify(self, image: Any) -> GlimpseResult:
        sent = {"model": self.id, "image": image_data(image)}
        return GlimpseResult(self._client.call("POST", "/api/vision/glimpses", sent), _short(sent))

    def caption(self, image: Any, *, beam_size: int = 1) -> CaptionResult:
        sent = {"model": self.id, "image": image_data(image), "beam_size": beam_size}
        return CaptionResult(self._client.call("POST", "/api/vision/caption", sent), _short(sent))

    def __repr__(self) -> str:
        return f"<RemoteVisionModel {self.id} at {self._client.url}>"


def _short(sent: dict[str, Any]) -> dict[str, Any]:
    """The request as kept on the result: the image's bytes left out (``image_bytes``: their size)."""
    return {**{k: v for k, v in sent.items() if k != "image"}, "image_bytes": len(sent["image"]) * 3 // 4}


def _validate(route: str, values: dict[str, Any]) -> Any:
    """The route's request schema validated from ``values``: the REST 422 otherwise."""
    from pydantic import ValidationError

    from attnscope.serving.vision_schemas import CaptionRequest, GlimpsesRequest

    schema = GlimpsesRequest if route == "glimpses" else CaptionRequest
    try:
        return schema.model_validate(values)
    except ValidationError as err:
        raise unprocessable([entry(("body", *e["loc"]), str(e["msg"]), str(e["type"])) for e in err.errors()]) from None
