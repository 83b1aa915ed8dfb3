"""Request and response bodies of the vision API (``/api/vision``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from attnscope.engine.schemas import StrictRequest
from attnscope.vision.images import MAX_BYTES

VisionModelId = Annotated[str, Field(min_length=1, max_length=200, description="A model id from /api/vision/models.")]
PngImage = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_BYTES * 4 // 3 + 64,
        description=(
            "A PNG or JPEG, base64 or as a data URL (data:image/png;base64,...): grayscale, or colour "
            "(then its luma, 0.299 R + 0.587 G + 0.114 B), any size up to 2048 a side, light items on "
            "black; transparent pixels count as black. A non-square image is padded with black to a square (centred), "
            "then scaled to the model's canvas."
        ),
    ),
]
_TINY_PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAAAAADhZOFXAAAAG0lEQVR4nGNgQAeMDAz/GRgYGBmYYCKYDEwAADRSAQhqhlB7AAAAAElFTkSuQmCC"


class VisionModelInfo(BaseModel):
    id: str
    kind: Literal["ram", "full-image-cnn", "captioner"]
    task: Literal["classify", "caption"] = Field(description="classify: /glimpses; caption: /caption.")
    dataset: Literal["translated", "cluttered", "scenes"] = Field(description="What it was trained on.")
    parameters: int
    canvas: int = Field(description="Side of the square image the model sees, pixels.")
    glimpses: int | None = Field(description="RAM: glimpses per image.")
    retina: list[int] | None = Field(description="RAM: side of each retina patch on the canvas, pixels.")
    grid: list[int] | None = Field(description="Captioner: [rows, cols] of the attention grid.")
    attention: bool = Field(description="False for the full-image CNN and the captioner without attention.")
    test: dict[str, Any] = Field(description="The card's test-split numbers (accuracy, or BLEU, exact match...).")
    card: dict[str, Any] = Field(description="The whole card.json: curve, hyperparameters, training.")


class VisionModelsResponse(BaseModel):
    models: list[VisionModelInfo]
    unavailable: dict[str, str] = Field(description="Folders that failed to load, with the reason.")


class GlimpsesRequest(StrictRequest):
    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "vision-ram-cluttered", "image": _TINY_PNG}]})

    model: VisionModelId
    image: PngImage


class Glimpse(BaseModel):
    step: int
    x: float = Field(description="Centre of the glimpse, in the input image's pixels (0 = left edge).")
    y: float = Field(description="Centre of the glimpse, in the input image's pixels (0 = top edge).")
    scales: list[float] = Field(description="Side of each retina patch, input pixels, smallest first.")


class GlimpsesResponse(BaseModel):
    model: str
    width: int = Field(description="The input image's width, pixels.")
    height: int
    classes: list[str] = Field(description="The class words, in the order of class_probs' columns.")
    glimpses: list[Glimpse] = Field(description="Where the RAM looked, in order; empty for a full-image CNN.")
    class_probs: list[list[float]] = Field(
        description="[step][class]: the answer after each glimpse (one row for a full-image CNN)."
    )
    prediction: str = Field(description="The class word of the final answer.")
    probability: float


class CaptionRequest(StrictRequest):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": "vision-sat-scenes", "image": _TINY_PNG, "beam_size": 3}]}
    )

    model: VisionModelId
    image: PngImage
    beam_size: int = Field(default=1, ge=1, le=10, description="Beam width; 1 is greedy decoding.")


class Extent(BaseModel):
    left: float = Field(description="Where the model's square canvas starts on the input, pixels (negative: padding).")
    top: float
    size: float = Field(description="Side of that square, input pixels; the grid divides it evenly.")


class CaptionResponse(BaseModel):
    model: str
    caption: str
    tokens: list[str] = Field(description="The words, then </s> when the decoder ended the caption.")
    attention: list[list[list[float]]] = Field(
        description="[token][row][col]: each token's attention over the grid (sums to 1); uniform without attention."
    )
    grid: list[int] = Field(description="[rows, cols].")
    uses_attention: bool
    extent: Extent = Field(description="The square of the input that the grid covers.")
    width: int
    height: int
    beam_size: int


class Sample(BaseModel):
    image: str = Field(description="A PNG data URL.")
    label: str = Field(description="The class word (canvases) or the reference caption (scenes).")
    item: dict[str, int] | None = Field(default=None, description="Canvases: the item's top-left x, y and size.")
    items: list[dict[str, Any]] | None = Field(default=None, description="Scenes: each item's class, row, col.")


class SamplesResponse(BaseModel):
    dataset: str
    seed: int
    width: int
    height: int
    samples: list[Sample]
