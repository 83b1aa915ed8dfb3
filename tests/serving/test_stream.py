"""POST /api/translate/stream over real HTTP: the step events, put back together, are exactly the
/api/translate answer (tokens, log-probabilities, every attention matrix, the beam tree), the last
event *is* that answer, errors before the first step are the plain JSON ones, and a client that
leaves mid-stream stops the decode (counted in /metrics)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

from attnscope.testing import TINY_KINDS

MODELS = [f"en-de-{suffix}" for suffix, _, _ in TINY_KINDS]
TEXT = "A man is riding a bicycle."


def parse_events(text: str) -> list[tuple[str, Any]]:
    """The ``event:``/``data:`` blocks of a text/event-stream body, data parsed as JSON."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((fields["event"], json.loads(fields["data"])))
    return out


def stream(http: httpx.Client, body: dict[str, Any]) -> list[tuple[str, Any]]:
    response = http.post("/api/translate/stream", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_events(response.text)


def pad(row: list[Any], width: int) -> list[Any]:
    return row + [0.0] * (width - len(row))


def rebuild_greedy(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Greedy: one row per step; the step's rows are the answer's query row t."""
    tokens = [s["chosen"][0]["token"] for s in steps]
    rebuilt: dict[str, Any] = {"target_tokens": tokens, "target_logprobs": [s["chosen"][0]["logprob"] for s in steps]}
    rebuilt["attention"] = _matrices(steps, [0] * len(steps))
    return rebuilt


def _matrices(steps: list[dict[str, Any]], rows: list[int]) -> dict[str, Any]:
    """[layer][head][query][key] per kind from each step's row ``rows[t]`` (decoder_self padded
    with zeros to the output length, as the answer pads it)."""
    out: dict[str, Any] = {}
    if "encoder_self" in steps[0]["attention"]:
        out["encoder_self"] = steps[0]["attention"]["encoder_self"]
    length = len(rows)
    for kind in ("cross", "decoder_self"):
        if kind not in steps[0]["attention"]:
            continue
        picked = [s["attention"][kind][r] for s, r in zip(steps, rows, strict=True)]  # [t][layer][head][key]
        layers, heads = len(picked[0]), len(picked[0][0])
        out[kind] = [
            [[pad(picked[t][la][h], length) if kind == "decoder_self" else picked[t][la][h] for t in range(length)]
             for h in range(heads)]
            for la in range(layers)
        ]  # fmt: skip
    return out


def rebuild_beam(steps: list[dict[str, Any]], bos: dict[str, Any]) -> dict[str, Any]:
    """Beam search: follow the back-pointers from the best finished hypothesis; rebuild the tree
    from every kept, finished and ended candidate (each carries its node id)."""
    nodes = {0: bos}
    row_nodes = [0]
    finished: list[tuple[int, int, dict[str, Any]]] = []  # (step, row, candidate)
    for s in steps:
        t = s["step"]
        for c, done in [(c, False) for c in s["chosen"] if c] + [(c, False) for c in s["ended"]] + [
            (c, True) for c in s["finished"]
        ]:
            node = {"id": c["node"], "parent": row_nodes[c["parent"]], "step": t + 1, "token": c["token"],
                    "token_id": c["token_id"], "logprob": c["logprob"], "score": c["score"], "finished": done}  # fmt: skip
            nodes[c["node"]] = node
        finished += [(t, c["parent"], c) for c in s["finished"]]
        row_nodes = [c["node"] if c else -1 for c in s["chosen"]]
    step, row, best = max(finished, key=lambda f: f[2]["ranking"])
    tokens, logprobs, rows = [best["token"]], [best["logprob"]], [row]
    for t in range(step, 0, -1):
        c = steps[t - 1]["chosen"][row]
        tokens.append(c["token"])
        logprobs.append(c["logprob"])
        row = c["parent"]
        rows.append(row)
    return {
        "target_tokens": tokens[::-1],
        "target_logprobs": logprobs[::-1],
        "attention": _matrices(steps[: step + 1], rows[::-1]),
        "nodes": [nodes[i] for i in sorted(nodes)],
    }


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("beam_size", [1, 4])
def test_events_rebuild_the_translate_answer(http: httpx.Client, model: str, beam_size: int) -> None:
    body = {"model": model, "text": TEXT, "beam_size": beam_size, "return_beam": beam_size > 1, "max_length": 12}
    # A stream never copies through placeholders (the steps are the search's own), so it equals
    # /api/translate with protect off, whatever the model's default
    expected = http.post("/api/translate", json={**body, "protect": False}).json()
    events = stream(http, body)
    names = [name for name, _ in events]
    assert names == ["step"] * (len(events) - 1) + ["answer"]
    steps = [data for _, data in events[:-1]]
    assert [s["step"] for s in steps] == list(range(len(steps)))
    assert steps[0]["source_tokens"] == expected["source_tokens"]
    # The last event is the answer: the same fields and values (only the decode's time differs).
    answer = events[-1][1]
    assert list(answer) == list(expected)
    assert {k: v for k, v in answer.items() if k != "timing_ms"} == {
        k: v for k, v in expected.items() if k != "timing_ms"
    }
    for s in steps:  # probabilities: each row's likeliest tokens, best first
        for top in s["top"]:
            ps = [t["p"] for t in top]
            assert ps == sorted(ps, reverse=True) and 0 < sum(ps) <= 1 + 1e-5
    if beam_size == 1:
        assert all(not s["beam"] and len(s["chosen"]) == 1 for s in steps)
        rebuilt = rebuild_greedy(steps)
    else:
        assert all(s["beam"] for s in steps)
        rebuilt = rebuild_beam(steps, expected["beam"]["nodes"][0])
        assert rebuilt["nodes"] == expected["beam"]["nodes"]
    assert rebuilt["target_tokens"] == expected["target_tokens"]
    assert rebuilt["target_logprobs"] == expected["target_logprobs"]
    assert rebuilt["attention"] == expected["attention"]  # exactly: rounded by the same code
    assert set(rebuilt["attention"]) == set(expected["attention"])


def test_streamed_attention_honours_kinds_and_precision(http: httpx.Client) -> None:
    body = {"model": "en-de-transformer", "text": TEXT, "beam_size": 1, "attention": ["cross"], "precision": 3}
    events = stream(http, body)
    steps = [data for name, data in events if name == "step"]
    assert all(set(s["attention"]) == {"cross"} for s in steps)
    values = [v for s in steps for row in s["attention"]["cross"] for la in row for h in la for v in h]
    assert all(round(v, 3) == v for v in values)
    assert events[-1][1]["attention"]["cross"] == rebuild_greedy(steps)["attention"]["cross"]


@pytest.mark.parametrize("model", ["en-de-transformer", "en-de-rnn-additive"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_answer_event_keeps_explain(http: httpx.Client, model: str, beam_size: int) -> None:
    """Issue 34: the final event is /api/translate's answer to the same body, `explain` included
    (the stream used to drop it, so its answer had no explanations)."""
    body = {"model": model, "text": TEXT, "beam_size": beam_size, "max_length": 10,
            "explain": ["norm", "rollout", "alti", "value_zeroing"]}  # fmt: skip
    expected = http.post("/api/translate", json={**body, "protect": False}).json()
    assert expected["explanations"] is not None
    answer = stream(http, body)[-1]
    assert answer[0] == "answer"
    assert list(answer[1]) == list(expected)
    assert {k: v for k, v in answer[1].items() if k != "timing_ms"} == {
        k: v for k, v in expected.items() if k != "timing_ms"
    }


def test_errors_before_the_first_step_are_plain_json(http: httpx.Client) -> None:
    unknown = http.post("/api/translate/stream", json={"model": "nope", "text": TEXT})
    assert unknown.status_code == 404 and "available" in unknown.json()
    empty = http.post("/api/translate/stream", json={"model": "en-de-transformer", "text": ""})
    assert empty.status_code == 422
    protected = http.post("/api/translate/stream", json={"model": "en-de-transformer", "text": TEXT, "protect": True})
    assert protected.status_code == 422
    assert protected.json()["errors"][0]["field"] == "protect"


def counter(metrics: str, name: str, label: str) -> float:
    found = re.search(rf'^{name}_total{{{label}}} (\S+)$', metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_client_that_leaves_stops_the_decode(http: httpx.Client, server: str) -> None:
    """Read one step of a long beam search, hang up: the decode is given up at its next step
    (the decode would run to its budget otherwise: a random tiny model rarely says </s>)."""
    before = http.get("/metrics").text
    body = {"model": "en-de-transformer", "text": " ".join([TEXT] * 6), "beam_size": 5, "max_length": 200}
    with httpx.Client(base_url=server, timeout=30) as other, other.stream(
        "POST", "/api/translate/stream", json=body
    ) as response:
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        assert next(lines) == "event: step"
    # The connection is closed; the server notices at its next event and stops the decode.
    deadline = time.monotonic() + 30
    while True:
        after = http.get("/metrics").text
        gone = 'reason="client_gone"'
        if counter(after, "attnscope_decodes_cancelled", gone) > counter(before, "attnscope_decodes_cancelled", gone):
            break
        assert time.monotonic() < deadline, "the decode was not stopped"
        time.sleep(0.1)
    outcome = 'outcome="client_gone"'
    assert counter(after, "attnscope_streams", outcome) > counter(before, "attnscope_streams", outcome)
    assert http.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT}).status_code == 200
