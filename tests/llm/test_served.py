"""The decoder-only API over HTTP, against a real server serving every imported layout."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from llm_builders import LAYOUTS

from attnscope.llm.folder import load_llm_folder
from attnscope.llm.search import LLMOptions, generate

SOURCE = "Two dogs play in the snow."


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_every_layout_is_served_with_its_template(server: str) -> None:
    with urllib.request.urlopen(f"{server}/api/llm/models", timeout=30) as response:
        models = {m["id"]: m for m in json.loads(response.read())["models"]}
    assert set(models) == {f"en-de-{layout}" for layout in LAYOUTS}
    assert "{source}" in models["en-de-qwen2"]["prompt_template"] and "{target_language}" in models["en-de-qwen2"]["prompt_template"]
    assert models["en-de-gpt2"]["prompt_template"] == "{source_language}: {source}\n{target_language}:"
    assert models["en-de-qwen2"]["heads"] == 5 and models["en-de-qwen2"]["kv_heads"] == 1


@pytest.mark.parametrize("layout", ["qwen2", "gemma3_text", "gpt2"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_answer_names_what_ran_and_its_views_are_slices_of_the_full_matrix(
    server: str, llm_models: Path, layout: str, beam_size: int
) -> None:
    views = ["target_source", "source_source", "target_target", "full"]
    status, a = post(f"{server}/api/llm/translate", {"model": f"en-de-{layout}", "text": SOURCE,
                                                      "beam_size": beam_size, "max_new_tokens": 7, "views": views})  # fmt: skip
    assert status == 200, a
    s0, s1 = a["source_span"]
    assert "".join(a["prompt_tokens"][s0:s1]).replace("▁", " ").strip() == SOURCE and a["source_tokens"] == a["prompt_tokens"][s0:s1]
    loaded = load_llm_folder(llm_models / f"en-de-{layout}")
    assert loaded.tokenizer.backend.encode(a["prompt"], add_special_tokens=layout == "gpt2").ids == a["prompt_token_ids"]
    local = generate(loaded.model, a["prompt_token_ids"], LLMOptions(beam_size=beam_size, max_new_tokens=7))
    assert a["target_token_ids"] == local.tokens
    first, t = a["first_target_row"], len(a["target_token_ids"])
    assert first == len(a["prompt_token_ids"]) - 1
    att = a["attention"]
    for layer, heads in enumerate(att["full"]):
        for head, full in enumerate(heads):
            assert len(full) == len(a["prompt_token_ids"]) + t - 1
            assert att["target_source"][layer][head] == [row[s0:s1] for row in full[first : first + t]]
            assert att["source_source"][layer][head] == [row[s0:s1] for row in full[s0:s1]]
            assert att["target_target"][layer][head] == [row[first:] for row in full[first:]]
            outside = torch.tensor(att["outside_source"][layer][head])
            torch.testing.assert_close(outside, 1 - torch.tensor(att["target_source"][layer][head]).sum(-1))


def test_a_head_switched_off_changes_the_output_distribution(server: str) -> None:
    body = {"model": "en-de-llama", "text": SOURCE, "max_new_tokens": 3}
    _, plain = post(f"{server}/api/llm/translate", body)
    status, off = post(f"{server}/api/llm/translate", body | {"disable_heads": [{"layer": 0, "head": 1}, {"layer": 2, "head": 5}]})
    assert status == 200 and off["heads_off"] == [[0, 1], [2, 5]]
    assert abs(plain["token_logprobs"][0] - off["token_logprobs"][0]) > 1e-4
    status, bad = post(f"{server}/api/llm/translate", body | {"disable_heads": [{"layer": 3, "head": 0}]})
    assert status == 422 and "3 layers" in json.dumps(bad)


def test_sampling_with_a_seed_gives_the_same_text_twice(server: str) -> None:
    body = {"model": "en-de-qwen3", "text": SOURCE, "sample": True, "seed": 7, "temperature": 1.5, "top_p": 0.95,
            "top_k": 50, "max_new_tokens": 12}  # fmt: skip
    answers = [post(f"{server}/api/llm/translate", body)[1] for _ in range(2)]
    assert answers[0]["target_token_ids"] == answers[1]["target_token_ids"] and answers[0]["text"] == answers[1]["text"]
    assert answers[0]["search"] == {"kind": "sample", "temperature": 1.5, "top_k": 50, "top_p": 0.95, "seed": 7}
    greedy = post(f"{server}/api/llm/translate", body | {"sample": False})[1]
    others = [post(f"{server}/api/llm/translate", body | {"seed": s})[1]["target_token_ids"] for s in (1, 2, 3)]
    assert any(o != greedy["target_token_ids"] for o in others)  # it does sample
    drawn = post(f"{server}/api/llm/translate", body | {"seed": None})[1]  # a seed is chosen and named
    again = post(f"{server}/api/llm/translate", body | {"seed": drawn["search"]["seed"]})[1]
    assert again["target_token_ids"] == drawn["target_token_ids"]


def test_a_request_brings_its_own_prompt_and_align_is_teacher_forced(server: str) -> None:
    template = "Q: {source_language} to {target_language}: {source}\nA:"
    status, a = post(f"{server}/api/llm/translate", {"model": "en-de-gemma2", "text": SOURCE, "prompt_template": template})
    assert status == 200 and a["prompt"].endswith(f"English to German: {SOURCE}\nA:")
    status, b = post(f"{server}/api/llm/align", {"model": "en-de-gemma2", "text": SOURCE, "target": "Zwei Hunde spielen."})
    assert status == 200 and b["search"] == {"kind": "teacher_forced"}
    rows = b["attention"]["target_source"][0][0]
    assert len(rows) == len(b["target_token_ids"]) and b["target_token_ids"][-1] == 4  # ends with <|im_end|>


def test_bad_requests_get_a_clear_error(server: str) -> None:
    url = f"{server}/api/llm/translate"
    status, body = post(url, {"model": "en-de-qwen2", "text": SOURCE, "prompt_template": "no slot"})
    assert status == 422 and "{source}" in json.dumps(body)
    status, body = post(url, {"model": "nope", "text": SOURCE})
    assert status == 404 and "en-de-qwen2" in json.dumps(body)
    status, body = post(url, {"model": "en-de-qwen2", "text": SOURCE, "max_new_tokens": 512, "views": ["full"]})
    assert status == 413 and "views" in json.dumps(body), body
    status, body = post(url, {"model": "en-de-qwen2", "text": SOURCE, "sample": True, "beam_size": 2})
    assert status == 422


def test_the_llm_page_and_its_script_are_served(server: str) -> None:
    with urllib.request.urlopen(f"{server}/llm", timeout=30) as response:
        page = response.read().decode()
    assert 'id="llm-view"' in page and "target × source" in page and "/static/js/llm.js" in page
    with urllib.request.urlopen(f"{server}/static/js/llm.js", timeout=30) as response:
        assert b"/api/llm/translate" in response.read()
    with urllib.request.urlopen(f"{server}/api/models", timeout=30) as response:
        listed = json.loads(response.read())  # the common list: each LLM once, as decoder_only, none failed
    assert sorted(m["id"] for m in listed["models"]) == sorted(f"en-de-{layout}" for layout in LAYOUTS)
    assert {m["architecture"] for m in listed["models"]} == {"decoder_only"} and listed["unavailable"] == []
