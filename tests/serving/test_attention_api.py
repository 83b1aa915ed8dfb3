"""``"attention": "on_demand"`` and ``GET /api/attention/...`` over real HTTP, for every family:
each head, layer and head average fetched later equals the inline answer's (JSON exactly at the
same precision, .npy within float16 rounding), on translate, align, batch and stream; bad kinds,
layers, heads and ids get 404/422 with a message; the answer is otherwise the inline one."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import pytest

from attnscope.testing import TINY_KINDS
from tests.serving.test_stream import stream

MODELS = [f"en-de-{suffix}" for suffix, _, _ in TINY_KINDS]
TEXT = "A man is riding a bicycle."
NPY = {"Accept": "application/x-npy"}
ON_DEMAND_ONLY = {"attention", "attention_id", "attention_shapes", "timing_ms"}


def fetch_npy(http: httpx.Client, url: str, dtype: str) -> np.ndarray:
    response = http.get(url, params={"dtype": dtype}, headers=NPY)
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-npy"
    return np.load(io.BytesIO(response.content), allow_pickle=False)


def check_on_demand(http: httpx.Client, inline: dict[str, Any], lazy: dict[str, Any], precision: int) -> None:
    """``lazy`` (on demand) is ``inline`` without its matrices, and every matrix comes back by id."""
    assert lazy["attention"] == {}
    assert {k: v for k, v in lazy.items() if k not in ON_DEMAND_ONLY} == {
        k: v for k, v in inline.items() if k not in ON_DEMAND_ONLY
    }
    shapes, base = lazy["attention_shapes"], f"/api/attention/{lazy['attention_id']}"
    assert set(shapes) == set(inline["attention"])
    for kind, weights in inline["attention"].items():
        full = np.array(weights)
        assert [shapes[kind][k] for k in ("layers", "heads", "rows", "columns")] == list(full.shape)
        for layer in range(full.shape[0]):
            got = http.get(f"{base}/{kind}/{layer}", params={"precision": precision}).json()
            assert got == weights[layer]  # every head of the layer, the same JSON numbers
            for head in range(full.shape[1]):
                one = http.get(f"{base}/{kind}/{layer}/{head}", params={"precision": precision})
                assert one.json() == weights[layer][head]
        half = fetch_npy(http, f"{base}/{kind}/{full.shape[0] - 1}", "float16")
        assert half.dtype == np.float16 and half.shape == full.shape[1:]
        assert np.allclose(half, full[-1], rtol=2**-11, atol=10.0 ** -precision)
        average = fetch_npy(http, f"{base}/{kind}", "float32")
        assert average.shape == (full.shape[0], *full.shape[2:])
        assert np.allclose(average, full.mean(axis=1), atol=10.0 ** -precision)


@pytest.mark.parametrize("model", MODELS)
def test_translate_on_demand_equals_inline(http: httpx.Client, model: str) -> None:
    for precision in (6, 3):
        body = {"model": model, "text": TEXT, "beam_size": 2, "precision": precision}
        raw = http.post("/api/translate", json=body)
        assert b"attention_id" not in raw.content and b"attention_shapes" not in raw.content  # inline: as before
        inline = raw.json()
        lazy = http.post("/api/translate", json={**body, "attention": "on_demand"}).json()
        check_on_demand(http, inline, lazy, precision)


@pytest.mark.parametrize("model", MODELS)
def test_align_batch_and_stream_on_demand(http: httpx.Client, model: str) -> None:
    aligned = {"model": model, "text": TEXT, "target": "Ein Mann fährt Rad."}
    inline = http.post("/api/align", json=aligned).json()
    check_on_demand(http, inline, http.post("/api/align", json={**aligned, "attention": "on_demand"}).json(), 6)
    batch = {"model": model, "texts": [TEXT, "Two dogs."], "beam_size": 1}
    inline_batch = http.post("/api/translate/batch", json=batch).json()
    lazy_batch = http.post("/api/translate/batch", json={**batch, "attention": "on_demand"}).json()
    assert len({a["attention_id"] for a in lazy_batch}) == 2
    for one, lazy in zip(inline_batch, lazy_batch, strict=True):
        check_on_demand(http, one, lazy, 6)
    events = stream(http, {"model": model, "text": TEXT, "beam_size": 1, "attention": "on_demand"})
    assert all("attention" not in data and data["attention_id"] for name, data in events if name == "step")
    name, answer = events[-1]
    assert name == "answer"
    plain = {"model": model, "text": TEXT, "beam_size": 1, "protect": False}  # a stream never protects
    check_on_demand(http, http.post("/api/translate", json=plain).json(), answer, 6)


@pytest.mark.parametrize(("model", "beam_size"), [(m, 1) for m in MODELS] + [("en-de-transformer", 3)])
def test_stream_steps_on_demand_equal_the_inline_rows(http: httpx.Client, model: str, beam_size: int) -> None:
    """An on-demand stream's step events carry no rows but their own id: every step's rows fetched
    by it ([layer][head][row][key]) are the inline step event's ([row][layer][head][key]) exactly,
    step 0 has the whole encoder_self, and one head of one step is one row per beam row."""
    body = {"model": model, "text": TEXT, "beam_size": beam_size, "max_length": 8, "precision": 4}
    inline = [data for name, data in stream(http, body) if name == "step"]
    lazy = [data for name, data in stream(http, {**body, "attention": "on_demand"}) if name == "step"]
    assert [s["chosen"] for s in lazy] == [s["chosen"] for s in inline] and len(lazy) > 1
    assert len({s["attention_id"] for s in lazy}) == len(lazy)
    for plain, step in zip(inline, lazy, strict=True):
        assert {k: v for k, v in step.items() if k not in ON_DEMAND_ONLY} == {
            k: v for k, v in plain.items() if k not in ON_DEMAND_ONLY
        }
        assert set(step["attention_shapes"]) == set(plain["attention"])
        base = f"/api/attention/{step['attention_id']}"
        for kind, rows in plain["attention"].items():
            expected = rows if kind == "encoder_self" else np.array(rows).transpose(1, 2, 0, 3).tolist()
            shape = step["attention_shapes"][kind]
            assert [shape[k] for k in ("layers", "heads", "rows", "columns")] == list(np.array(expected).shape)
            for layer, heads in enumerate(expected):
                assert http.get(f"{base}/{kind}/{layer}", params={"precision": 4}).json() == heads
            one = http.get(f"{base}/{kind}/0/0", params={"precision": 4}).json()
            assert one == expected[0][0]
            assert len(one) == (len(step["source_tokens"]) if kind == "encoder_self" else len(step["top"]))  # a row per live row
    assert "encoder_self" not in lazy[1]["attention_shapes"]


def test_explanations_by_the_same_id(http: httpx.Client) -> None:
    body = {"model": "en-de-transformer", "text": TEXT, "beam_size": 1}
    inline = http.post("/api/translate", json={**body, "explain": ["norm", "rollout", "alti"]}).json()["explanations"]
    base = f"/api/attention/{http.post('/api/translate', json={**body, 'attention': 'on_demand'}).json()['attention_id']}"
    assert http.get(f"{base}/cross/0/1", params={"method": "norm"}).json() == inline["norm"]["cross"][0][1]
    assert http.get(f"{base}/encoder_self", params={"method": "rollout"}).json() == inline["rollout"]["encoder_self"]
    assert http.get(f"{base}/cross/1", params={"method": "alti"}).json() == inline["alti"]["source"][1]
    assert http.get(f"{base}/encoder_self", params={"method": "alti"}).json() == inline["alti"]["encoder"]
    per_layer = http.get(f"{base}/cross/0/0", params={"method": "rollout"})
    assert per_layer.status_code == 422 and "no heads" in per_layer.json()["detail"]
    rnn = http.post("/api/translate", json={**body, "model": "en-de-rnn-additive", "attention": "on_demand"}).json()
    missing = http.get(f"/api/attention/{rnn['attention_id']}/cross", params={"method": "alti"})
    assert missing.status_code == 422 and "alti is not available" in missing.json()["detail"]


def test_bad_requests_say_what_is_wrong(http: httpx.Client) -> None:
    lazy = http.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT, "attention": "on_demand"}).json()
    base = f"/api/attention/{lazy['attention_id']}"
    layers, heads = lazy["attention_shapes"]["cross"]["layers"], lazy["attention_shapes"]["cross"]["heads"]
    cases = {
        f"{base}/nope": (404, "has no kind 'nope'"),
        f"{base}/cross/{layers}": (404, f"there is no layer {layers}"),
        f"{base}/cross/0/{heads}": (404, f"there is no head {heads}"),
        f"{base}/cross/x": (422, "layer"),
        f"{base}/cross?dtype=float64": (422, "dtype"),
        f"{base}/cross?method=magic": (422, "method"),
        "/api/attention/1234abcd-0000/cross": (404, "sticky routing"),
        "/api/attention/whatever/cross": (404, "translate again"),
    }
    for url, (status, text) in cases.items():
        response = http.get(url)
        assert response.status_code == status, url
        assert text in response.json()["detail"], (url, response.json())
    wrong = http.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT, "attention": "cross"})
    assert wrong.status_code == 422 and "attention" in wrong.text
    none = http.post("/api/translate", json={"model": "en-de-rnn-none", "text": TEXT, "attention": "on_demand"}).json()
    assert none["attention_shapes"] == {} and none["attention"] == {}


def test_openapi_lists_the_routes(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    for path in ("/api/attention/{attention_id}/{kind}", "/api/attention/{attention_id}/{kind}/{layer}",
                 "/api/attention/{attention_id}/{kind}/{layer}/{head}", "/api/attention"):
        assert "get" in paths[path]
    assert "application/x-npy" in paths["/api/attention/{attention_id}/{kind}/{layer}/{head}"]["get"]["responses"]["200"]["content"]
