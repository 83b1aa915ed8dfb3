"""The vision API's contract and its answers to bad input (TestClient over tiny random models
and synthetic Fashion-MNIST files); the page test drives the same routes over real HTTP."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from PIL import Image

from attnscope.config import Settings
from attnscope.serving.main import create_app
from attnscope.vision.data import CLASSES
from attnscope.vision.images import decode_png, encode_png
from attnscope.vision.scenes import Placed, caption
from attnscope.vision.testing import build_tiny_vision_models

RAM, CNN, SAT, NOATT = "vision-ram-cluttered", "vision-cnn-translated", "vision-sat-scenes", "vision-noattn-scenes"


@pytest.fixture(scope="module")
def vision_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision-models")
    build_tiny_vision_models(root)
    return root


def client_for(models_dir: Path, fashion_dir: Path | None) -> TestClient:
    settings = Settings(models_dir=models_dir, fashion_mnist_dir=fashion_dir, device="cpu", torch_threads=1)
    return TestClient(create_app(settings), base_url="http://localhost")  # an allowed Host name


@pytest.fixture(scope="module")
def client(vision_models: Path, fashion_dir: Path) -> Iterator[TestClient]:
    with client_for(vision_models, fashion_dir) as c:
        yield c


def png(array: np.ndarray, mode: str | None = None) -> str:
    """base64 PNG of a uint8 array (mode picked by Pillow unless given)."""
    buffer = io.BytesIO()
    image = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def item_image(size: int = 60) -> np.ndarray:
    image = np.zeros((size, size), dtype=np.uint8)
    image[size // 6 : size // 2, size // 3 : size * 2 // 3] = 255
    return image


def test_models_lists_the_vision_models_apart_from_translation(client: TestClient) -> None:
    answer = client.get("/api/vision/models").json()
    by_id = {m["id"]: m for m in answer["models"]}
    assert set(by_id) == {RAM, CNN, SAT, NOATT, "vision-ram-translated"}
    assert by_id[RAM]["task"] == "classify" and by_id[RAM]["glimpses"] == 3 and by_id[RAM]["retina"] == [12, 24, 48]
    assert by_id[SAT]["grid"] == [7, 7] and by_id[SAT]["attention"] is True and by_id[NOATT]["attention"] is False
    assert by_id[CNN]["attention"] is False and by_id[CNN]["canvas"] == 60
    assert by_id[SAT]["card"]["curve"] and answer["unavailable"] == {}
    assert client.get("/api/models").json()["models"] == []  # the translation side does not see them


def test_glimpses_contract(client: TestClient) -> None:
    answer = client.post("/api/vision/glimpses", json={"model": RAM, "image": png(item_image())}).json()
    assert answer["width"] == answer["height"] == 60 and answer["classes"] == list(CLASSES)
    assert [g["step"] for g in answer["glimpses"]] == [0, 1, 2]
    assert all(g["scales"] == [12, 24, 48] and 0 <= g["x"] <= 60 and 0 <= g["y"] <= 60 for g in answer["glimpses"])
    probs = np.array(answer["class_probs"])
    assert probs.shape == (3, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    assert answer["prediction"] == CLASSES[int(probs[-1].argmax())]
    assert answer["probability"] == pytest.approx(probs[-1].max())
    again = client.post("/api/vision/glimpses", json={"model": RAM, "image": png(item_image())}).json()
    assert again == answer  # the policy's mean: deterministic


def test_glimpses_are_in_the_input_pixels(client: TestClient) -> None:
    small = client.post("/api/vision/glimpses", json={"model": RAM, "image": png(item_image())}).json()
    big = client.post("/api/vision/glimpses", json={"model": RAM, "image": png(item_image().repeat(2, 0).repeat(2, 1))}).json()
    for a, b in zip(small["glimpses"], big["glimpses"], strict=True):
        assert b["x"] == pytest.approx(2 * a["x"], abs=0.05) and b["y"] == pytest.approx(2 * a["y"], abs=0.05)
        assert b["scales"] == [24, 48, 96]
    wide = item_image()[15:45]  # 60×30: padded to the square it was cut from
    cut = client.post("/api/vision/glimpses", json={"model": RAM, "image": png(wide)}).json()
    padded = np.zeros((60, 60), dtype=np.uint8)
    padded[15:45] = wide
    full = client.post("/api/vision/glimpses", json={"model": RAM, "image": png(padded)}).json()
    assert cut["height"] == 30
    for a, b in zip(cut["glimpses"], full["glimpses"], strict=True):
        assert a["x"] == pytest.approx(b["x"], abs=1e-4) and a["y"] == pytest.approx(b["y"] - 15, abs=1e-4)


def test_full_image_cnn_takes_no_glimpses(client: TestClient) -> None:
    answer = client.post("/api/vision/glimpses", json={"model": CNN, "image": png(item_image())}).json()
    assert answer["glimpses"] == [] and len(answer["class_probs"]) == 1


@pytest.mark.parametrize(("model", "beam"), [(SAT, 1), (SAT, 3), (NOATT, 2)])
def test_caption_contract(client: TestClient, model: str, beam: int) -> None:
    scene = np.zeros((84, 84), dtype=np.uint8)
    scene[0:28, 28:56] = item_image(28)
    answer = client.post("/api/vision/caption", json={"model": model, "image": png(scene), "beam_size": beam}).json()
    attention = np.array(answer["attention"])
    assert answer["grid"] == [7, 7] and attention.shape == (len(answer["tokens"]), 7, 7)
    assert np.allclose(attention.sum((1, 2)), 1, atol=1e-5)  # per token
    assert answer["caption"] == " ".join(t for t in answer["tokens"] if t != "</s>")
    assert answer["extent"] == {"left": 0, "top": 0, "size": 84} and answer["beam_size"] == beam
    assert answer["uses_attention"] is (model == SAT)
    if model == NOATT:
        assert np.allclose(attention, 1 / 49)


def test_caption_beam_one_is_greedy_decoding(client: TestClient) -> None:
    scene = png(np.tile(item_image(28), (3, 3)))
    default = client.post("/api/vision/caption", json={"model": SAT, "image": scene}).json()
    assert default["beam_size"] == 1
    assert client.post("/api/vision/caption", json={"model": SAT, "image": scene, "beam_size": 1}).json() == default


def colour_png() -> str:
    rgb = np.zeros((20, 20, 3), dtype=np.uint8)
    rgb[..., 0] = 200
    return png(rgb)


BAD_IMAGES = [
    ("not base64 at all!", 422, "not valid base64"),
    (base64.b64encode(b"GIF89a......").decode(), 422, "not a PNG"),
    ("data:image/jpeg;base64,/9j/4AAQ", 422, "not a readable JPEG"),  # a JPEG cut off after its header
    ("data:image/gif;base64,R0lGODlhAQABAAAAACw=", 422, "not a PNG or JPEG"),
    ("data:image/png,rawdata", 422, "data URL must look like"),
    (base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10).decode(), 422, "not a readable PNG"),
    (png(np.zeros((4, 4), dtype=np.uint8)), 422, "at least 8"),
    (png(np.zeros((10, 3000), dtype=np.uint8)), 413, "limit is 2048"),
]


@pytest.mark.parametrize(("image", "status", "message"), BAD_IMAGES)
@pytest.mark.parametrize("route", ["glimpses", "caption"])
def test_bad_images_get_a_clear_4xx(client: TestClient, route: str, image: str, status: int, message: str) -> None:
    model = RAM if route == "glimpses" else SAT
    r = client.post(f"/api/vision/{route}", json={"model": model, "image": image})
    assert r.status_code == status, r.text
    assert message in r.json()["detail"]
    if status == 422:
        assert r.json()["errors"][0]["field"] == "image"


@pytest.mark.parametrize("mode", ["LA", "RGBA", "I;16", "1", "P"])
def test_gray_pngs_in_other_modes_are_accepted(client: TestClient, mode: str) -> None:
    if mode == "I;16":  # a real 16-bit PNG spans 0..65535
        image = png(item_image().astype(np.uint16) * 257)
        assert Image.open(io.BytesIO(base64.b64decode(image))).mode == "I;16"
    else:
        image = png(item_image(), mode)
    assert np.allclose(decode_png(image), item_image() / 255, atol=1 / 255)
    assert client.post("/api/vision/glimpses", json={"model": RAM, "image": image}).status_code == 200


def jpeg(array: np.ndarray, mode: str = "RGB") -> str:
    buffer = io.BytesIO()
    Image.fromarray(array).convert(mode).save(buffer, format="JPEG", quality=95)
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    "image",
    [colour_png(), jpeg(np.dstack([np.full((20, 20), 200, np.uint8)] + [np.zeros((20, 20), np.uint8)] * 2))],
    ids=["colour PNG", "colour JPEG"],
)
def test_colour_images_become_their_luma(image: str) -> None:
    """A pure red (200, 0, 0) image is 0.299 * 200 / 255 gray: ITU-R 601 luma, as Pillow's "L"."""
    assert np.allclose(decode_png(image), 0.299 * 200 / 255, atol=3 / 255)  # JPEG rounds a little
    assert np.allclose(decode_png("data:image/jpeg;base64," + image), decode_png(image))  # the bytes decide


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
@pytest.mark.parametrize("route", ["glimpses", "caption"])
def test_jpegs_and_colour_uploads_are_accepted(client: TestClient, route: str, mode: str) -> None:
    model = RAM if route == "glimpses" else SAT
    rgb = np.zeros((84, 84, 3), dtype=np.uint8)
    rgb[10:50, 20:60] = (250, 180, 40)  # an orange item on black
    for image in (jpeg(rgb, mode), "data:image/jpeg;base64," + jpeg(rgb, mode), png(rgb)):
        r = client.post(f"/api/vision/{route}", json={"model": model, "image": image})
        assert r.status_code == 200, r.text
    item = decode_png(jpeg(rgb, mode))
    assert item[30, 40] > 0.6 and item[70, 10] < 0.05  # light item, dark background, as drawn


def test_browser_canvas_data_url_is_accepted(client: TestClient) -> None:
    rgba = np.zeros((30, 30, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    rgba[5:20, 5:20, :3] = 255
    url = "data:image/png;base64," + png(rgba)
    assert client.post("/api/vision/glimpses", json={"model": RAM, "image": url}).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"model": "nope", "image": "x"}, 404, None),
        ({"model": SAT, "image": png(item_image())}, 422, "model"),  # a captioner on /glimpses
        ({"model": RAM}, 422, "image"),
        ({"model": RAM, "image": ""}, 422, "image"),
        ({"model": RAM, "image": 5}, 422, "image"),
        ({"model": RAM, "image": "x", "extra": 1}, 422, "extra"),
    ],
)
def test_glimpses_bad_requests(client: TestClient, body: dict[str, Any], status: int, field: str | None) -> None:
    r = client.post("/api/vision/glimpses", json=body)
    assert r.status_code == status, r.text
    if status == 404:
        assert RAM in r.json()["available"]
    else:
        assert r.json()["errors"][0]["field"] == field


@pytest.mark.parametrize("beam", [0, 11, "3"])
def test_caption_bad_beam(client: TestClient, beam: Any) -> None:
    r = client.post("/api/vision/caption", json={"model": SAT, "image": png(item_image(84)), "beam_size": beam})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "beam_size"
    r = client.post("/api/vision/caption", json={"model": RAM, "image": png(item_image(84))})
    assert r.status_code == 422 and SAT in r.json()["detail"]


def test_samples_of_canvases(client: TestClient) -> None:
    answer = client.get("/api/vision/samples", params={"dataset": "cluttered", "n": 3, "seed": 4}).json()
    assert answer["dataset"] == "cluttered" and answer["width"] == 60 and len(answer["samples"]) == 3
    for sample in answer["samples"]:
        assert sample["label"] in CLASSES
        pixels = decode_png(sample["image"])
        x, y = sample["item"]["x"], sample["item"]["y"]
        assert pixels.shape == (60, 60) and pixels[y : y + 28, x : x + 28].sum() > 0
        cls = CLASSES.index(sample["label"])  # the synthetic class bar, rows 2c+3 .. 2c+8 of the item
        bar = pixels[y + 2 * cls + 3 : y + 2 * cls + 9, x + 4 : x + 24]
        assert bar.min() > 0.75
    again = client.get("/api/vision/samples", params={"dataset": "cluttered", "n": 3, "seed": 4}).json()
    assert again == answer
    other = client.get("/api/vision/samples", params={"dataset": "cluttered", "n": 3, "seed": 5}).json()
    assert other != answer


def test_samples_of_scenes_carry_their_captions(client: TestClient) -> None:
    answer = client.get("/api/vision/samples", params={"dataset": "scenes", "n": 5}).json()
    assert answer["width"] == 84 and answer["seed"] == 0
    for sample in answer["samples"]:
        layout = [Placed(CLASSES.index(i["class"]), i["row"], i["col"]) for i in sample["items"]]
        assert sample["label"] == caption(layout)
        assert decode_png(sample["image"]).shape == (84, 84)


@pytest.mark.parametrize("query", [{"dataset": "mnist"}, {}, {"dataset": "scenes", "n": 0}, {"dataset": "scenes", "n": 65}, {"dataset": "scenes", "seed": -1}])
def test_samples_bad_queries(client: TestClient, query: dict[str, Any]) -> None:
    r = client.get("/api/vision/samples", params=query)
    assert r.status_code == 422 and r.json()["detail"]


def test_samples_without_the_data_say_how_to_install_it(vision_models: Path, tmp_path: Path) -> None:
    with client_for(vision_models, tmp_path / "missing") as c:
        r = c.get("/api/vision/samples", params={"dataset": "translated"})
        assert r.status_code == 503 and "apt-get install dataset-fashion-mnist" in r.json()["detail"]
        assert c.post("/api/vision/glimpses", json={"model": RAM, "image": png(item_image())}).status_code == 200


def test_openapi_documents_the_vision_api(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    validate(spec)
    for method, path in [("get", "/api/vision/models"), ("post", "/api/vision/glimpses"),
                         ("post", "/api/vision/caption"), ("get", "/api/vision/samples")]:
        assert spec["paths"][path][method]["summary"]
    assert {"413", "422", "404"} <= set(spec["paths"]["/api/vision/caption"]["post"]["responses"])
    assert "attention" in spec["components"]["schemas"]["CaptionResponse"]["properties"]


def test_example_image_of_the_docs_works(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    example = spec["components"]["schemas"]["GlimpsesRequest"]["examples"][0]
    example["model"] = RAM
    assert client.post("/api/vision/glimpses", json=example).status_code == 200
    assert encode_png(np.zeros((8, 8))).startswith("data:image/png;base64,")
