"""LLM lens/DLA and patching are priced by the model's size (issue 45: priced by positions only,
a 0.5B model's patching grid was admitted and ran for minutes). The price's flops equal what
``torch.utils.flop_counter`` counts of the job itself (an independent count of every matrix
product), and over real HTTP a request past a limit is a 422 naming it and one the machine cannot
finish before its deadline a 503 with ``Retry-After``, both before any job runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnscope.engine import llm_route_prices as prices
from attnscope.engine.route_prices import ROUTE_PRICES
from attnscope.inside import decoder_only as inside
from attnscope.nn.decoder_only import DecoderOnlyLM
from attnscope.nn.decoder_only_config import DecoderOnlyConfig
from attnscope.testing import running_server

SENTENCE = "A man is riding a bicycle."


def _counted(job: object) -> int:
    with FlopCounterMode(display=False) as counter:
        job()  # type: ignore[operator]
    return int(counter.get_total_flops())


@pytest.mark.parametrize(
    "sizes",
    [
        {},  # Llama layout: gated feed-forward, 4 query heads over 2 key/value heads, tied output
        {"gated_ff": False, "activation": "gelu", "heads": 6, "kv_heads": 3, "layers": 3, "ff_dim": 96,
         "tied_output": False, "d_model": 48, "head_dim": 8},
    ],
)
def test_the_price_counts_every_product_the_job_runs(sizes: dict[str, object]) -> None:
    torch.manual_seed(0)
    config = DecoderOnlyConfig(vocab_size=50, **sizes)  # type: ignore[arg-type]
    model = DecoderOnlyLM(config).eval()
    prompt, corrupted, target = list(range(5, 12)), list(range(12, 19)), [3, 8, 9, 2]
    shape = prices.llm_shape(config, len(prompt), len(target))
    with torch.no_grad():
        lens = _counted(lambda: inside.inspect(model, prompt, target, k=2))
        patching = _counted(lambda: inside.patch(model, prompt, corrupted, target))
    assert ROUTE_PRICES["llm_lens"].flops(shape) == lens
    assert ROUTE_PRICES["llm_patching"].flops(shape) == patching


def test_a_larger_model_costs_more_at_the_same_length() -> None:
    """The issue's case: at equal positions, a 0.5B-shaped model (Qwen2.5-0.5B's sizes) is
    priced far above the tiny one, and far past a minute's work at any rate near the tiny one's."""
    tiny = DecoderOnlyConfig(vocab_size=50)
    big = DecoderOnlyConfig(vocab_size=151_936, d_model=896, layers=24, heads=14, kv_heads=2, head_dim=64,
                            ff_dim=4864)  # fmt: skip
    small_price, big_price = (ROUTE_PRICES["llm_patching"].flops(prices.llm_shape(c, 40, 20)) for c in (tiny, big))
    assert big_price > 1e13 and big_price > 1e4 * small_price  # ~51 TFLOP: minutes on a CPU


@pytest.fixture(scope="module")
def strict_server(llm_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server of the tiny Llama alone, with a small floats limit and a 1 µs deadline, which no
    priced job can meet."""
    root = tmp_path_factory.mktemp("llm-prices")
    (root / "en-de-llama").symlink_to(llm_models / "en-de-llama")
    env = {"ATTNSCOPE_MAX_ROUTE_FLOATS": "60000", "ATTNSCOPE_REQUEST_TIMEOUT_S": "0.000001"}
    log = tmp_path_factory.mktemp("llm-prices-log") / "server.log"
    with running_server(root, log, env=env) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def _jobs(client: httpx.Client) -> float:
    """Jobs the decode slots have run (the count of the batch-size histogram)."""
    found = re.search(r"^attnscope_batch_texts_count (\S+)$", client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize(
    ("path", "body", "status", "names"),
    [
        # the log-probabilities over the vocabulary at 7 points of 11 target tokens: ~104,000 floats
        ("/api/lens", {"model": "en-de-llama", "text": SENTENCE, "target": "Ein Mann fährt Rad."}, 422,
         "ATTNSCOPE_MAX_ROUTE_FLOATS"),
        # a one-token target (and the stop token): ~45,000 floats, but no job meets a 1 µs deadline
        ("/api/lens", {"model": "en-de-llama", "text": SENTENCE, "target": "E", "k": 1}, 503,
         "ATTNSCOPE_REQUEST_TIMEOUT_S"),
        ("/api/patch", {"model": "en-de-llama", "clean": SENTENCE, "corrupted": SENTENCE, "target": "Ein Mann."}, 422,
         "ATTNSCOPE_MAX_ROUTE_FLOATS"),
        # without a target the translation comes first, priced in its own slot
        ("/api/lens", {"model": "en-de-llama", "text": SENTENCE, "beam_size": 1}, 503, "ATTNSCOPE_REQUEST_TIMEOUT_S"),
        # the decode routes, priced by the model's size too (before: admitted, then a 504 after the job)
        ("/api/llm/translate", {"model": "en-de-llama", "text": SENTENCE, "max_new_tokens": 2}, 503,
         "ATTNSCOPE_REQUEST_TIMEOUT_S"),
        ("/api/translate", {"model": "en-de-llama", "text": SENTENCE, "max_length": 2}, 503, "ATTNSCOPE_REQUEST_TIMEOUT_S"),
        ("/api/attribution", {"model": "en-de-llama", "text": SENTENCE, "target": "E", "steps": 1}, 503,
         "ATTNSCOPE_REQUEST_TIMEOUT_S"),
    ],
)
def test_llm_routes_are_refused_before_any_job(
    strict_server: httpx.Client, path: str, body: dict[str, object], status: int, names: str
) -> None:
    before = _jobs(strict_server)
    r = strict_server.post(path, json=body)
    assert r.status_code == status, r.text[:400]
    assert names in r.json()["detail"]
    if status == 503:
        assert int(r.headers["Retry-After"]) >= 1
    assert _jobs(strict_server) == before, "refused before any job ran"


def test_a_large_llm_attribution_is_priced_past_any_deadline() -> None:
    """Integrated gradients on a 0.5B-shaped model took 216 s on this CPU; its price, at the
    tiny model's 2,500 flops per unit and the scheduler's prior rate, is far past a 30 s deadline,
    and its logits alone are past the default floats limit."""
    big = DecoderOnlyConfig(vocab_size=151_936, d_model=896, layers=24, heads=14, kv_heads=2, head_dim=64,
                            ff_dim=4864)  # fmt: skip
    shape = prices.llm_shape(big, 40, 20)
    shape = type(shape)(shape.geometry, shape.vocab, shape.width, 40, 20, {**shape.knobs, "steps": 16})
    assert ROUTE_PRICES["llm_attribution"].flops(shape) > 1e13
    assert ROUTE_PRICES["llm_attribution"].floats(shape) > 1e8


def test_the_attribution_and_explanation_prices_bound_what_the_jobs_count() -> None:
    """Integrated gradients and each decoder-only explanation, counted by ``torch.utils.flop_counter``
    on a random model: the price is at or above the count (it errs towards refusing) and within 2×."""
    from attnscope.explain import registry
    from attnscope.llm.attribution import attribute_llm

    torch.manual_seed(0)
    config = DecoderOnlyConfig(vocab_size=60)
    model = DecoderOnlyLM(config).eval()
    prompt, span, target = list(range(5, 17)), (3, 9), [20, 21, 22, 4]
    shape = prices.llm_shape(config, len(prompt), len(target))
    shape = type(shape)(shape.geometry, shape.vocab, shape.width, len(prompt), len(target),
                        {**shape.knobs, "steps": 8, "span": span[1] - span[0]})  # fmt: skip
    counted = {"llm_attribution": _counted(lambda: attribute_llm(model, prompt, span, target, steps=8))}
    sentence = registry.Sentence(model, prompt, target, source_span=span)
    for method in prices.EXPLAIN_METHODS:
        with torch.no_grad():
            counted[f"llm_explain_{method}"] = _counted(lambda m=method: registry.method(m).runs["decoder_only"](sentence))
    for route, flops in counted.items():
        priced = ROUTE_PRICES[route].flops(shape)
        assert flops <= priced <= 2 * flops, (route, flops, priced)


@pytest.fixture(scope="module")
def floats_server(llm_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The tiny Llama with a floats limit that a one-step attribution and a rollout stay under, and
    a 16-step attribution and ALTI do not."""
    root = tmp_path_factory.mktemp("llm-floats")
    (root / "en-de-llama").symlink_to(llm_models / "en-de-llama")
    log = tmp_path_factory.mktemp("llm-floats-log") / "server.log"
    with running_server(root, log, env={"ATTNSCOPE_MAX_ROUTE_FLOATS": "250000"}) as url, \
            httpx.Client(base_url=url, timeout=60) as client:  # fmt: skip
        yield client


def test_llm_attribution_and_explanations_by_id_are_priced(floats_server: httpx.Client) -> None:
    client, body = floats_server, {"model": "en-de-llama", "text": "Hi.", "target": "E"}
    before = _jobs(client)
    r = client.post("/api/attribution", json=body | {"steps": 16})
    assert r.status_code == 422 and "ATTNSCOPE_MAX_ROUTE_FLOATS" in r.json()["detail"], r.text[:400]
    assert _jobs(client) == before + 1, "only the teacher-forced pass ran, not integrated gradients"
    r = client.post("/api/attribution", json=body | {"steps": 1})
    assert r.status_code == 200, r.text[:400]
    assert len(r.json()["integrated_gradients"]) == len(r.json()["target_tokens"])
    kept = client.post("/api/translate", json={"model": "en-de-llama", "text": SENTENCE, "beam_size": 1,
                                               "max_length": 4, "attention": "on_demand"}).json()  # fmt: skip
    base = f"/api/attention/{kept['attention_id']}/cross/1"
    before = _jobs(client)
    r = client.get(base, params={"method": "alti"})
    assert r.status_code == 422 and "ATTNSCOPE_MAX_ROUTE_FLOATS" in r.json()["detail"], r.text[:400]
    assert _jobs(client) == before, "refused before the job"
    r = client.get(base, params={"method": "rollout"})
    assert r.status_code == 200, r.text[:400]
