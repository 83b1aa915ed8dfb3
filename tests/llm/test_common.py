"""Decoder-only models through the doors every model has (/api/translate, /api/align, batch,
stream, /api/models, attention on demand, attnscope.Client), against the session's real server
(conftest.py): each common kind is exactly the slice of /api/llm/translate's full causal matrix
named by the answer's own source span, and the explanations agree with /api/llm/translate's."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest
from test_served import SOURCE, post

import attnscope

VIEWS = ["target_source", "source_source", "target_target", "full"]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


@pytest.mark.parametrize(("layout", "beam_size"), [("qwen2", 1), ("gemma3_text", 3), ("gpt2", 1)])
def test_the_common_answer_is_the_llm_answer_cut_as_an_encoder_decoders(server: str, layout: str, beam_size: int) -> None:
    model = f"en-de-{layout}"
    status, a = post(f"{server}/api/translate", {"model": model, "text": SOURCE, "beam_size": beam_size,
                                                 "max_length": 6, "precision": 8})  # fmt: skip
    assert status == 200, a
    _, ref = post(f"{server}/api/llm/translate", {"model": model, "text": SOURCE, "beam_size": beam_size,
                                                  "max_new_tokens": 6, "views": VIEWS})  # fmt: skip
    ctx = a["llm"]
    assert ctx["target_token_ids"] == ref["target_token_ids"] and a["translation"] == ref["text"]
    assert ctx["prompt"] == ref["prompt"] and ctx["source_span"] == ref["source_span"]
    s0, s1 = ctx["source_span"]
    first, t = ctx["first_target_row"], len(ctx["target_token_ids"])
    assert a["source_tokens"] == ref["prompt_tokens"][s0:s1] and a["target_tokens"] == ref["target_tokens"]
    assert a["decoder_input_tokens"] == [ref["prompt_tokens"][-1], *ref["target_tokens"][:-1]]
    assert sorted(a["attention"]) == ["cross", "decoder_self", "encoder_self"]
    full = np.array(ref["attention"]["full"])  # (L, H, n, n)
    np.testing.assert_allclose(a["attention"]["cross"], full[:, :, first : first + t, s0:s1], atol=1e-8)
    np.testing.assert_allclose(a["attention"]["encoder_self"], full[:, :, s0:s1, s0:s1], atol=1e-8)
    np.testing.assert_allclose(a["attention"]["decoder_self"], full[:, :, first:, first:], atol=1e-8)
    np.testing.assert_allclose(ctx["outside_source"], 1 - full[:, :, first : first + t, s0:s1].sum(-1), atol=1e-6)
    assert a["finished"] == (ref["target_token_ids"][-1] == 4)  # <|im_end|>
    assert sum(len(w["tokens"]) for w in a["source_words"]) == s1 - s0
    np.testing.assert_allclose(a["target_logprobs"], ref["token_logprobs"], atol=1e-6)


def test_models_lists_llms_and_the_registry_says_what_they_support(server: str) -> None:
    models = {m["id"]: m for m in get(f"{server}/api/models")["models"]}
    qwen = models["en-de-qwen2"]
    assert qwen["architecture"] == "decoder_only" and qwen["heads"] == 5 and qwen["card"]["kv_heads"] == 1
    assert qwen["attention"] == ["cross", "encoder_self", "decoder_self"] and "{source}" in qwen["card"]["prompt_template"]
    methods = {m["name"]: m["families"]["decoder_only"] for m in get(f"{server}/api/explain-methods")["methods"]}
    assert methods["rollout"] is None and methods["norm"] is None
    assert methods["value_zeroing"] is None and methods["alti"] is None
    with urllib.request.urlopen(f"{server}/models", timeout=30) as response:
        assert b"en-de-qwen2" in response.read()  # the Models page's cards


def test_explanations_equal_the_llm_routes_and_unsupported_methods_are_422(server: str) -> None:
    body = {"model": "en-de-llama", "text": SOURCE, "beam_size": 1, "explain": ["rollout", "norm"], "precision": 8,
            "disable_heads": [{"kind": "decoder_self", "layer": 1, "head": 2}]}  # fmt: skip
    status, a = post(f"{server}/api/translate", body | {"max_length": 5})
    assert status == 200, a
    _, ref = post(f"{server}/api/llm/translate", {"model": "en-de-llama", "text": SOURCE, "max_new_tokens": 5,
                                                  "explain": ["rollout", "norm"], "disable_heads": [{"layer": 1, "head": 2}]})  # fmt: skip
    assert a["llm"]["target_token_ids"] == ref["target_token_ids"] and a["disabled_heads"][0]["head"] == 2
    e, r = a["explanations"], ref["explanations"]
    # Common: one teacher-forced pass through the registry's runner; /api/llm: the decode's own rows
    np.testing.assert_allclose(e["rollout"]["cross"], r["rollout"]["target_source"], atol=1e-5)
    np.testing.assert_allclose(e["norm"]["cross"], r["norm"]["target_source"], atol=1e-5)
    np.testing.assert_allclose(e["norm_values"]["cross"], r["norm"]["value_norms"], atol=1e-5)
    status, err = post(f"{server}/api/translate", body | {"explain": ["no_such_method"]})
    assert status == 422 and err["errors"][0]["loc"][:2] == ["body", "explain"]
    for field, value in (("coverage_penalty", 0.2), ("protect", True), ("beam_size", 9)):
        status, err = post(f"{server}/api/translate", {"model": "en-de-llama", "text": SOURCE, field: value})
        assert status == 422 and err["errors"][0]["loc"] == ["body", field], err


def test_on_demand_align_and_batch(server: str) -> None:
    model, texts = "en-de-qwen3", [SOURCE, "A man sleeps."]
    _, inline = post(f"{server}/api/translate", {"model": model, "text": SOURCE, "beam_size": 2, "max_length": 5})
    status, kept = post(f"{server}/api/translate", {"model": model, "text": SOURCE, "beam_size": 2, "max_length": 5,
                                                     "attention": "on_demand", "return_beam": True})  # fmt: skip
    assert status == 200 and kept["attention"] == {}
    assert kept["attention_shapes"]["cross"]["columns"] == len(inline["source_tokens"])
    head = get(f"{server}/api/attention/{kept['attention_id']}/cross/1/3")
    np.testing.assert_allclose(head, inline["attention"]["cross"][1][3], atol=1e-6)
    best = kept["beam"]["best"]
    assert [kept["beam"]["nodes"][i]["token"] for i in best[1:]] == kept["target_tokens"]
    status, aligned = post(f"{server}/api/align", {"model": model, "text": SOURCE, "target": "Zwei Hunde."})
    _, ref = post(f"{server}/api/llm/align", {"model": model, "text": SOURCE, "target": "Zwei Hunde."})
    assert status == 200 and aligned["translation"] == "Zwei Hunde." and aligned["llm"]["target_token_ids"] == ref["target_token_ids"]
    np.testing.assert_allclose(aligned["attention"]["cross"], ref["attention"]["target_source"], atol=1e-6)
    status, batch = post(f"{server}/api/translate/batch", {"model": model, "texts": texts, "beam_size": 1, "max_length": 4})
    singles = [post(f"{server}/api/translate", {"model": model, "text": t, "beam_size": 1, "max_length": 4})[1] for t in texts]
    assert status == 200 and [b["llm"]["target_token_ids"] for b in batch] == [s["llm"]["target_token_ids"] for s in singles]


def test_the_python_client_loads_an_llm(server: str) -> None:
    model = attnscope.Client(server).load("en-de-gpt2")
    result = model.translate(SOURCE, beam_size=1, max_length=4)
    assert result.attention["cross"].shape[-1] == len(result.source_tokens)
    assert result.attention["cross"].shape[:2] == (2, 3)  # layers × query heads


def test_load_runs_an_llm_folder_in_process_with_the_servers_answers(server: str, llm_models) -> None:  # noqa: ANN001
    model = attnscope.load(llm_models / "en-de-qwen2")
    try:
        assert model.info["architecture"] == "decoder_only" and model.info["heads"] == 5
        local = model.translate(SOURCE, beam_size=1, max_length=4, explain=["norm"])
        _, remote = post(f"{server}/api/translate", {"model": "en-de-qwen2", "text": SOURCE, "beam_size": 1,
                                                     "max_length": 4, "explain": ["norm"]})  # fmt: skip
        assert local["llm"]["target_token_ids"] == remote["llm"]["target_token_ids"]
        np.testing.assert_allclose(local.attention["cross"], remote["attention"]["cross"], atol=1e-6)
        np.testing.assert_allclose(local.explanation("norm"), remote["explanations"]["norm"]["cross"], atol=1e-5)
        with pytest.raises(attnscope.InvalidRequest, match="explain"):
            model.translate(SOURCE, explain=["no_such_method"])
        _, remote = post(f"{server}/api/attribution", {"model": "en-de-qwen2", "text": SOURCE, "target": "Zwei Hunde.", "steps": 4})
        attributed = model.attribute(SOURCE, target="Zwei Hunde.", steps=4)
        np.testing.assert_allclose(attributed["integrated_gradients"], remote["integrated_gradients"], atol=1e-6)
        foil = {"position": 0, "token": "Hundeschlittenrennen"}  # a foil of several tokens: the server's numbers
        _, remote = post(f"{server}/api/attribution", {"model": "en-de-qwen2", "text": SOURCE, "target": "Zwei Hunde.",
                                                       "steps": 4, "contrast": foil})  # fmt: skip
        local_contrast = model.attribute(SOURCE, target="Zwei Hunde.", steps=4, contrast=foil)["contrastive"]
        assert local_contrast["difference"] == pytest.approx(remote["contrastive"]["difference"], abs=1e-6)
        np.testing.assert_allclose(local_contrast["integrated_gradients"], remote["contrastive"]["integrated_gradients"],
                                   atol=1e-6)  # fmt: skip
    finally:
        model.close()


def test_value_zeroing_equals_zeroing_each_value_in_the_original(server: str, llm_sources, llm_models) -> None:  # noqa: ANN001
    """Independent: Hugging Face's own Llama, run whole once per source token with that token's
    v_proj output zeroed in one layer, that layer's output rows compared by cosine distance. Both
    models in float64 (the served float32 model's layer outputs carry ~3 digits of 1 - cos)."""
    import torch
    import transformers

    from attnscope.explain.registry import Sentence
    from attnscope.explain.value_zeroing import decoder_only_value_zeroing
    from attnscope.llm.folder import load_llm_folder

    status, a = post(f"{server}/api/translate", {"model": "en-de-llama", "text": "Two dogs play.", "beam_size": 1,
                                                 "max_length": 4, "explain": ["value_zeroing"], "precision": 8})  # fmt: skip
    assert status == 200, a
    served = np.array(a["explanations"]["value_zeroing"]["cross"])  # (L, T, S), rows sum to 1
    ctx = a["llm"]
    (s0, s1), first = ctx["source_span"], ctx["first_target_row"]
    assert served.shape == (3, len(ctx["target_token_ids"]), s1 - s0)
    np.testing.assert_allclose(served.sum(-1), 1.0, atol=1e-6)
    model = load_llm_folder(llm_models / "en-de-llama").model.double()
    ours = decoder_only_value_zeroing(Sentence(model, ctx["prompt_token_ids"], ctx["target_token_ids"], source_span=(s0, s1)))
    np.testing.assert_allclose(ours["cross"].numpy(), served, atol=1e-3)
    ids = torch.tensor([(ctx["prompt_token_ids"] + ctx["target_token_ids"])[:-1]])
    hf = transformers.AutoModelForCausalLM.from_pretrained(llm_sources["llama"], attn_implementation="eager",
                                                           dtype=torch.float64).eval()  # fmt: skip
    layers = hf.model.layers

    def layer_output(layer: int, zero: int | None) -> torch.Tensor:
        seen: list[torch.Tensor] = []
        out_hook = layers[layer].register_forward_hook(lambda _m, _a, out: seen.append(out[0] if isinstance(out, tuple) else out))
        v_hook = layers[layer].self_attn.v_proj.register_forward_hook(
            lambda _m, _a, out: out.index_fill(1, torch.tensor([zero]), 0.0) if zero is not None else out)
        with torch.no_grad():
            hf(input_ids=ids)
        out_hook.remove(), v_hook.remove()
        return seen[0][0, first:]  # (T, D)

    for layer in range(len(layers)):
        plain = layer_output(layer, None)
        d = torch.stack([1 - torch.cosine_similarity(layer_output(layer, j), plain, dim=-1) for j in range(s0, s1)], dim=1)
        d = torch.where(d > 1e-6, d, torch.zeros_like(d))
        np.testing.assert_allclose(ours["cross"][layer].numpy(), (d / d.sum(-1, keepdim=True)).numpy(), atol=1e-6)


def test_on_demand_is_not_priced_as_an_answer_carrying_the_views() -> None:
    """The answer-size limit counts what an answer carries: on demand, the views stay in the
    store, so a request refused inline (413 naming the limit) is admitted on demand (it was refused
    alike: a 0.5B-shaped LLM's 42-word sentence could not be asked on demand at all)."""
    from types import SimpleNamespace

    import torch

    from attnscope.llm.common import llm_requests
    from attnscope.llm.service import Budget, LLMRequestError, LLMService

    service = LLMService(".", torch.device("cpu"), Budget(max_floats=10**12, max_answer_bytes=10**6))
    translator = SimpleNamespace(loaded=SimpleNamespace(config=SimpleNamespace(layers=24, heads=14)))
    body = SimpleNamespace(model="m", text="A dog runs.", beam_size=1, max_length=48)
    inline, lazy = (
        llm_requests(SimpleNamespace(**vars(body), attention=a), source_lang="en", target_lang="de")[0] for a in (None, "on_demand")
    )
    assert lazy.views == inline.views  # the same views recorded, for the store
    with pytest.raises(LLMRequestError, match="answer limit") as refused:
        service.admit(translator, inline, prompt_length=60, source=20)
    assert refused.value.status == 413
    service.admit(translator, lazy, prompt_length=60, source=20)  # no error
