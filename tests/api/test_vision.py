"""The vision models in Python: ``attnscope.load(<vision folder>)`` classifies and captions with the
answers of ``/api/vision/glimpses`` and ``/caption`` over a real server, through ``Client`` too,
with glimpses and attention as numpy arrays and the REST errors as exceptions."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

import attnscope
from attnscope.api.vision import LocalVisionModel, RemoteVisionModel, image_data
from attnscope.config import Settings
from attnscope.testing import running_server
from attnscope.vision.testing import build_tiny_vision_models

RAM, CNN, SAT = "vision-ram-cluttered", "vision-cnn-translated", "vision-sat-scenes"


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api-vision")
    build_tiny_vision_models(root)
    return root


@pytest.fixture(scope="module")
def server(vision_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(vision_dir, tmp_path_factory.mktemp("api-vision-log") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    """A 60×60 canvas: a light bar on black, floats in [0, 1]."""
    canvas = np.zeros((60, 60), dtype=np.float64)
    canvas[20:30, 10:40] = 0.8
    return canvas


def test_classify_equals_the_route(vision_dir: Path, server: str, image: np.ndarray) -> None:
    local = attnscope.load(vision_dir / RAM, device="cpu")
    assert isinstance(local, LocalVisionModel) and local.info["task"] == "classify"
    result = local.classify(image)
    rest = httpx.post(f"{server}/api/vision/glimpses", json={"model": RAM, "image": image_data(image)}, timeout=60)
    assert rest.status_code == 200, rest.text
    remote = attnscope.Client(server).load(RAM)
    assert result.to_dict() == rest.json() == remote.classify(image).to_dict()
    steps = local.info["glimpses"]
    assert result.glimpses.shape == (steps, 2) and result.class_probs.shape == (steps, len(result.classes))
    np.testing.assert_allclose(result.class_probs.sum(axis=1), 1.0, atol=1e-5)
    assert result.scales.shape == (steps, len(local.info["retina"]))
    assert result.prediction == result.classes[int(result.class_probs[-1].argmax())]
    cnn = attnscope.load(CNN, models_dir=vision_dir, device="cpu").classify(image)
    assert cnn.glimpses.shape == (0, 2) and cnn.class_probs.shape == (1, 10)


def test_every_image_form_is_the_same_image(vision_dir: Path, image: np.ndarray, tmp_path: Path) -> None:
    local = attnscope.load(vision_dir / RAM, device="cpu")
    expected = local.classify(image).to_dict()
    pixels = np.rint(image * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    (tmp_path / "x.png").write_bytes(buffer.getvalue())
    rgb = np.repeat(pixels[:, :, None], 3, axis=2)
    for form in (pixels, rgb, Image.fromarray(pixels), buffer.getvalue(), tmp_path / "x.png", str(tmp_path / "x.png")):
        assert local.classify(form).to_dict() == expected, type(form)


def test_caption_equals_the_route(vision_dir: Path, server: str, image: np.ndarray) -> None:
    local = attnscope.load(SAT, models_dir=vision_dir, device="cpu")
    remote = attnscope.Client(server).load(SAT)
    canvas = np.zeros((84, 84))
    canvas[10:30, 50:70] = 1.0
    for beam_size in (1, 2):
        result = local.caption(canvas, beam_size=beam_size)
        assert result.to_dict() == remote.caption(canvas, beam_size=beam_size).to_dict()
        grid = local.info["grid"]
        assert result.attention.shape == (len(result.tokens), *grid)
        np.testing.assert_allclose(result.attention.sum(axis=(1, 2)), 1.0, atol=1e-5)
        assert result.caption == " ".join(t for t in result.tokens if t != "</s>")


@pytest.mark.parametrize(
    ("model", "call"),
    [
        (RAM, lambda m: m.caption(np.zeros((60, 60)))),  # a classifier has no caption: the route's 422
        (SAT, lambda m: m.classify(np.zeros((84, 84)))),
        (RAM, lambda m: m.classify("data:image/png;base64,AAAA")),  # not a PNG
        (SAT, lambda m: m.caption(np.zeros((84, 84)), beam_size=99)),  # the schema's bound
    ],
    ids=["caption-on-ram", "classify-on-captioner", "bad-png", "beam"],
)
def test_errors_are_the_routes(
    vision_dir: Path, server: str, model: str, call: object, request: pytest.FixtureRequest
) -> None:
    """Either door raises InvalidRequest with the route's 422 text (for a method of the other
    task the server names its models of that task, the local model the method to call)."""
    local = LocalVisionModel(vision_dir / model, Settings(device="cpu"))
    info = local.info
    remote = RemoteVisionModel(attnscope.Client(server), model, info)
    with pytest.raises(attnscope.InvalidRequest) as mine:
        call(local)  # type: ignore[operator]
    with pytest.raises(attnscope.InvalidRequest) as theirs:
        call(remote)  # type: ignore[operator]
    if "-on-" in request.node.callspec.id:
        right = "classify()" if model == RAM else "caption()"
        assert str(mine.value).partition(";")[0] == str(theirs.value).partition(";")[0]
        assert str(mine.value).endswith(f"call {right} on it") and "for this endpoint use one of" in str(theirs.value)
    else:
        assert str(mine.value) == str(theirs.value) and mine.value.errors == theirs.value.errors


def test_unknown_vision_id_lists_both_kinds(vision_dir: Path, server: str) -> None:
    with pytest.raises(attnscope.ModelNotFound) as local:
        attnscope.load("vision-nothing", models_dir=vision_dir)
    with pytest.raises(attnscope.ModelNotFound) as remote:
        attnscope.Client(server).load("vision-nothing")
    assert RAM in local.value.available and RAM in remote.value.available
