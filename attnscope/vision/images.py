"""PNG or JPEG in, PNG out: the images of the vision API.

Requests carry a PNG or JPEG as base64 or as a data URL (``data:image/png;base64,...``); the
bytes say which, not the URL's type (a browser types a file by its name). Grayscale images are
used as they are; colour ones (a canvas exports RGBA, a photo is a colour JPEG) become their
luma, ITU-R 601 (0.299 R + 0.587 G + 0.114 B), the one gray channel the models see;
transparency is composited onto black, the canvases' background. A non-square image is padded
with black to a square (centred), then scaled to the model's canvas; :class:`Frame` maps canvas
pixels back to the input's pixels."""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SIGNATURE = b"\xff\xd8\xff"
LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R 601, as Pillow's convert("L")
MAX_BYTES = 4 * 1024 * 1024
MAX_SIDE = 2048
MIN_SIDE = 8
Image.MAX_IMAGE_PIXELS = MAX_SIDE * MAX_SIDE  # decompression bombs fail before decoding
_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
_ADDRESS = re.compile(r"\s*\(?\bat 0x[0-9a-fA-F]+\)?|0x[0-9a-fA-F]{6,}")


class ImageError(ValueError):
    """A request image that cannot be used; ``status`` is 413 when it is too large, else 422."""

    def __init__(self, message: str, status: int = 422) -> None:
        self.status = status
        super().__init__(message)


def decode_png(
    value: str, *, max_bytes: int = MAX_BYTES, max_side: int = MAX_SIDE, check: Callable[[int, int], None] | None = None
) -> np.ndarray:
    """base64 PNG or JPEG (or data URL) -> (H, W) float32 array in [0, 1], 1 = white. ``check``
    hears the width and height read from the header, before any pixel is decoded, and may raise
    (an admission limit): what it raises passes through unchanged."""
    text = value.strip()
    if text.startswith("data:"):
        header, sep, text = text.partition(",")
        if not sep or ";base64" not in header:
            raise ImageError("a data URL must look like data:image/png;base64,<data>")
    if len(text) > max_bytes * 4 // 3 + 4:
        raise ImageError(f"image is too large: more than {max_bytes} bytes", status=413)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("image is not valid base64") from None
    if not raw.startswith((PNG_SIGNATURE, JPEG_SIGNATURE)):
        raise ImageError("image is not a PNG or JPEG (its first bytes are neither signature)")
    kind = "PNG" if raw.startswith(PNG_SIGNATURE) else "JPEG"
    try:
        with Image.open(io.BytesIO(raw)) as img:
            if max(img.size) > max_side:
                raise ImageError(f"image is {img.width}×{img.height} pixels; the limit is {max_side} a side", status=413)
            if min(img.size) < MIN_SIDE:
                raise ImageError(f"image is {img.width}×{img.height} pixels; it needs at least {MIN_SIDE} a side")
            if check is not None:
                try:
                    check(img.width, img.height)
                except Exception as err:
                    raise _Refused(err) from None
            img.load()
            return _gray(img)
    except ImageError:
        raise
    except _Refused as refused:
        raise refused.err from None
    except Image.DecompressionBombError:
        raise ImageError(f"image has too many pixels (limit {max_side}×{max_side})", status=413) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, TypeError, IndexError, KeyError,
            EOFError, struct.error, ZeroDivisionError, OverflowError, MemoryError) as err:  # fmt: skip
        # Malformed chunks (IHDR, cHRM, pHYs, sRGB, gAMA, palettes, APNG acTL) raise any of these
        # deep inside Pillow: each is the client's broken file, a 422, never a 500.
        raise ImageError(f"image is not a readable {kind}: {_reason(err)}") from None


class _Refused(Exception):
    """What ``check`` raised, carried past the handlers of Pillow's errors."""

    def __init__(self, err: Exception) -> None:
        self.err = err


def _reason(err: BaseException) -> str:
    """The error's message without object reprs and heap addresses (``<... at 0x7f...>``)."""
    text = _OBJECT_REPR.sub("an object", str(err))
    text = _ADDRESS.sub("", text).strip()
    return text[:200] or type(err).__name__


def _gray(img: Image.Image) -> np.ndarray:
    mode = img.mode
    if mode in ("1", "L"):
        return np.asarray(img.convert("L"), dtype=np.float32) / 255
    if mode in ("I;16", "I;16B", "I"):
        values = np.asarray(img, dtype=np.float32)
        top = 65535.0 if mode.startswith("I;16") or values.max() > 255 else 255.0
        return np.clip(values / top, 0, 1)
    if mode in ("LA", "La"):
        gray, alpha = (np.asarray(band, dtype=np.float32) / 255 for band in img.convert("LA").split())
        return gray * alpha
    if mode in ("RGB", "RGBA", "RGBX", "P", "PA", "CMYK", "YCbCr"):  # colour: its luma (gray stays gray)
        rgba = np.asarray(img.convert("RGBA"), dtype=np.float32) / 255
        return np.clip(rgba[..., :3] @ LUMA, 0, 1) * rgba[..., 3]
    raise ImageError(f"image mode {mode} is not supported; send a grayscale or RGB PNG or JPEG")


@dataclass(frozen=True)
class Frame:
    """Where the model's canvas lies on the input image: its square of side ``size`` input
    pixels starts at (``left``, ``top``) (negative where the image was padded)."""

    left: float
    top: float
    size: float
    canvas: int

    def to_input(self, x: float, y: float) -> tuple[float, float]:
        """Canvas pixel coordinates -> the input image's pixel coordinates."""
        scale = self.size / self.canvas
        return self.left + x * scale, self.top + y * scale

    def length(self, canvas_pixels: float) -> float:
        return canvas_pixels * self.size / self.canvas


def to_canvas(image: np.ndarray, canvas: int) -> tuple[Tensor, Frame]:
    """(H, W) in [0, 1] -> ((1, 1, canvas, canvas) tensor, its :class:`Frame`)."""
    h, w = image.shape
    side = max(h, w)
    square = np.zeros((side, side), dtype=np.float32)
    top, left = (side - h) // 2, (side - w) // 2
    square[top : top + h, left : left + w] = image
    if side != canvas:
        resample = Image.Resampling.BOX if side > canvas else Image.Resampling.BILINEAR
        square = np.asarray(Image.fromarray(square).resize((canvas, canvas), resample), dtype=np.float32)
    tensor = torch.from_numpy(np.clip(square, 0, 1).copy())[None, None]
    return tensor, Frame(left=-left, top=-top, size=side, canvas=canvas)


def encode_png(image: Tensor | np.ndarray) -> str:
    """(H, W) (or (1, H, W)) values in [0, 1] -> a ``data:image/png;base64,...`` URL (mode L)."""
    array = image.detach().cpu().numpy() if isinstance(image, Tensor) else np.asarray(image)
    array = np.squeeze(array)
    pixels = np.clip(np.rint(array * 255), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
