"""What-if prefixes, alternatives, the anatomy of a step, attribution, step events and
explanations by id for decoder-only models, over HTTP against the session's real server
(conftest.py), each checked against Hugging Face's own eager model (the original the tiny model
was imported from), computed here independently of attnscope's model code."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_served import SOURCE, post

from attnscope.llm.folder import load_llm_folder


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _array(nested: Any) -> np.ndarray:
    """Nested lists with null (a masked key) as NaN."""
    return np.array(nested, dtype=float)


_ORIGINALS: dict[Path, Any] = {}


def _original(folder: Path) -> Any:
    """The Hugging Face model, eager attention, float32 (kept for the module)."""
    if folder not in _ORIGINALS:
        from transformers import AutoModelForCausalLM

        _ORIGINALS[folder] = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                                  dtype=torch.float32).eval()  # fmt: skip
    return _ORIGINALS[folder]


def _prefix_ids(folder: Path, prefix: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(prefix, add_special_tokens=False).ids


@pytest.mark.parametrize(("layout", "beams"), [("llama", 1), ("qwen2", 3)])
def test_a_prefix_is_forced_then_continued_as_generate_continues_it(
    server: str, llm_sources: dict[str, Path], llm_models: Path, layout: str, beams: int
) -> None:
    budget, prefix = 8, "Zwei Hunde"
    status, a = post(f"{server}/api/translate", {"model": f"en-de-{layout}", "text": SOURCE, "beam_size": beams,
                                                 "max_length": budget, "prefix": prefix})  # fmt: skip
    assert status == 200, a
    forced, out, prompt = _prefix_ids(llm_sources[layout], prefix), a["llm"]["target_token_ids"], a["llm"]["prompt_token_ids"]
    assert a["forced_tokens"] == len(forced) > 1 and out[: len(forced)] == forced
    original, stops = _original(llm_sources[layout]), list(load_llm_folder(llm_models / f"en-de-{layout}").config.stop_ids)
    with torch.no_grad():
        theirs = original.generate(torch.tensor([prompt + forced]), max_new_tokens=budget - len(forced), num_beams=beams,
                                   do_sample=False, eos_token_id=stops, pad_token_id=0)[0, len(prompt) + len(forced) :]  # fmt: skip
        logits = original(input_ids=torch.tensor([prompt + out[:-1]])).logits[0, len(prompt) - 1 :]
    assert out[len(forced) :] == [t for t in theirs.tolist() if t != 0 or t in stops][: len(out) - len(forced)]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(out)[:, None])[:, 0]
    np.testing.assert_allclose(a["target_logprobs"][: len(forced)], expected[: len(forced)].numpy(), atol=1e-4)
    assert np.array(a["attention"]["cross"]).shape[2] == len(out)  # a row for every token, forced ones too
    status, err = post(f"{server}/api/translate", {"model": f"en-de-{layout}", "text": SOURCE, "max_length": 2, "prefix": prefix})
    assert status == 422 and err["errors"][0]["loc"] == ["body", "prefix"] and "no room" in err["detail"]


def _hf_anatomy(original: Any, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hugging Face's own (q·k after rotary (L, H, n, n), attention (L, H, n, n), logits (n, V)):
    q and k from each layer's q_proj/k_proj on the input its self_attn received, rotated by
    its own apply_rotary_pos_emb with the position embeddings it was given."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    seen: list[dict[str, Any]] = []
    layers = original.model.layers
    hooks = [layer.self_attn.register_forward_pre_hook(lambda _m, args, kwargs: seen.append(kwargs), with_kwargs=True)
             for layer in layers]  # fmt: skip
    with torch.no_grad():
        out = original(input_ids=torch.tensor([ids]), output_attentions=True)
    for hook in hooks:
        hook.remove()
    dots = []
    for layer, kwargs in zip(layers, seen, strict=True):
        attn, h = layer.self_attn, kwargs["hidden_states"]
        shape = (*h.shape[:-1], -1, attn.head_dim)
        q, k = attn.q_proj(h).view(shape).transpose(1, 2), attn.k_proj(h).view(shape).transpose(1, 2)
        if getattr(attn, "q_norm", None) is not None:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = apply_rotary_pos_emb(q, k, *kwargs["position_embeddings"])
        k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
        dots.append((q @ k.transpose(2, 3))[0].detach())
    return torch.stack(dots), torch.stack(out.attentions)[:, 0], out.logits[0]


@pytest.mark.parametrize("layout", ["gemma2", "llama"])  # soft-capped, query_pre_attn_scalar; plain GQA
def test_alternatives_and_the_anatomy_equal_the_original_stage_by_stage(
    server: str, llm_sources: dict[str, Path], layout: str
) -> None:
    status, a = post(f"{server}/api/translate", {"model": f"en-de-{layout}", "text": SOURCE, "beam_size": 1,
                                                 "max_length": 5, "alternatives": 4, "return_scores": True,
                                                 "precision": 8})  # fmt: skip
    assert status == 200, a
    ctx, anatomy = a["llm"], a["llm"]["anatomy"]
    (s0, s1), first, t = ctx["source_span"], ctx["first_target_row"], len(ctx["target_token_ids"])
    original = _original(llm_sources[layout])
    dot, attention, logits = _hf_anatomy(original, (ctx["prompt_token_ids"] + ctx["target_token_ids"])[:-1])
    attn0 = original.model.layers[0].self_attn
    cap = original.config.attn_logit_softcapping if layout == "gemma2" else None
    assert anatomy["scale"] == pytest.approx(attn0.scaling) and anatomy["softcap"] == cap
    assert a["score_scale"] == pytest.approx(1 / attn0.scaling) and a["key_dim"] == attn0.head_dim
    cross = (slice(None), slice(None), slice(first, first + t), slice(s0, s1))
    hidden = attention[cross].numpy() == 0  # keys the causal or sliding-window mask hides: null
    assert np.isnan(_array(anatomy["dot"]["cross"])[hidden]).all() and (hidden.any() == (layout == "gemma2"))
    np.testing.assert_allclose(_array(anatomy["dot"]["cross"])[~hidden], dot[cross].numpy()[~hidden], atol=1e-4)
    scores = dot * attn0.scaling
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap
    np.testing.assert_allclose(_array(a["attention_scores"]["cross"])[~hidden], scores[cross].numpy()[~hidden], atol=1e-5)
    weights = np.nan_to_num(np.exp(_array(a["attention_scores"]["cross"]) - np.array(anatomy["logsumexp"]["cross"])[..., None]))
    np.testing.assert_allclose(weights, attention[cross].numpy(), atol=1e-5)  # the softmax over the whole row
    np.testing.assert_allclose(a["attention"]["cross"], weights, atol=1e-6)
    own = _array(a["attention_scores"]["decoder_self"])[0, 0]
    assert np.isnan(own[0, 1:]).all()  # causal: a row never sees later output (masked keys are null)
    values, found = torch.log_softmax(logits[first:], -1).topk(4, dim=-1)
    assert [[x["token_id"] for x in step] for step in a["alternatives"]] == found.tolist()
    np.testing.assert_allclose([[x["logprob"] for x in step] for step in a["alternatives"]], values.numpy(), atol=1e-4)
    assert [step[0]["token_id"] for step in a["alternatives"]] == ctx["target_token_ids"]  # greedy took the best


def test_attribution_equals_gradients_through_the_original(server: str, llm_sources: dict[str, Path]) -> None:
    """Input × gradient and integrated gradients (8 trapezoid steps from the zeroed source
    embeddings) recomputed with Hugging Face's Llama fed ``inputs_embeds``."""
    steps, target = 8, "Zwei Hunde."
    status, a = post(f"{server}/api/attribution", {"model": "en-de-llama", "text": SOURCE, "target": target, "steps": steps})
    assert status == 200, a
    _, aligned = post(f"{server}/api/align", {"model": "en-de-llama", "text": SOURCE, "target": target})
    ctx = aligned["llm"]
    (s0, s1), prompt, out = ctx["source_span"], ctx["prompt_token_ids"], ctx["target_token_ids"]
    assert a["source_tokens"] == aligned["source_tokens"] and a["target_tokens"] == aligned["target_tokens"]
    np.testing.assert_allclose(a["cross_attention"], aligned["attention"]["cross"], atol=1e-6)
    assert np.array(a["correlation"]["integrated_gradients"]).shape == (3, 6)  # layers × query heads
    original = _original(llm_sources["llama"])
    ids = torch.tensor([(prompt + out)[:-1]])
    x = original.model.embed_tokens(ids).detach()  # (1, n, D)
    alphas = torch.linspace(0, 1, steps + 1)
    scale = torch.ones(steps + 1, x.size(1), 1)
    scale[:, s0:s1] = alphas[:, None, None]
    z = (x * scale).requires_grad_(True)  # the path: the source's embeddings × α, the rest as they are
    f = torch.log_softmax(original(inputs_embeds=z).logits[:, len(prompt) - 1 :], -1)
    f = f.gather(-1, torch.tensor(out)[None, :, None].expand(steps + 1, -1, 1))[..., 0]  # (m+1, T)
    trapezoid = torch.full((steps + 1,), 1 / steps)
    trapezoid[[0, -1]] = 0.5 / steps
    ixg, ig = [], []
    for t in range(len(out)):
        (grad,) = torch.autograd.grad(f[:, t].sum(), z, retain_graph=True)
        integrand = (grad[:, s0:s1] * x[:, s0:s1]).sum(-1)  # (m+1, S)
        ixg.append(integrand[-1])
        ig.append((trapezoid[:, None] * integrand).sum(0))

    def normalised(rows: list[torch.Tensor]) -> np.ndarray:
        m = torch.stack(rows).abs().detach()
        return (m / m.sum(-1, keepdim=True)).numpy()

    np.testing.assert_allclose(a["input_x_gradient"], normalised(ixg), atol=1e-4)
    np.testing.assert_allclose(a["integrated_gradients"], normalised(ig), atol=1e-4)
    status, err = post(f"{server}/api/attribution", {"model": "en-de-llama", "text": SOURCE, "target": target,
                                                     "contrast": {"position": 0, "token": "Zwei"}})  # fmt: skip
    assert a["target_tokens"][0] == "Zwei"  # the foil is the token written there: nothing to contrast
    assert status == 422 and err["errors"][0]["loc"] == ["body", "contrast", "token"], err
    assert "wrote there" in err["errors"][0]["msg"], err


def _events(server: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    request = urllib.request.Request(f"{server}/api/translate/stream", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read().decode()
    found = []
    for block in text.strip().split("\n\n"):
        kind, data = block.split("\n", 1)
        found.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return found


def test_a_stream_sends_each_step_then_the_translate_answer(server: str) -> None:
    body = {"model": "en-de-gemma3_text", "text": SOURCE, "beam_size": 1, "max_length": 5}
    events = _events(server, body)
    _, answer = post(f"{server}/api/translate", body)
    *steps, (last, streamed) = events
    assert last == "answer" and {k: v for k, v in streamed.items() if k != "timing_ms"} == {
        k: v for k, v in answer.items() if k != "timing_ms"}  # fmt: skip
    assert [kind for kind, _ in steps] == ["step"] * len(answer["target_tokens"])
    assert steps[0][1]["source_tokens"] == answer["source_tokens"]
    assert steps[0][1]["attention"]["encoder_self"] == answer["attention"]["encoder_self"]
    cross, own = np.array(answer["attention"]["cross"]), np.array(answer["attention"]["decoder_self"])
    for t, (_, event) in enumerate(steps):
        assert event["step"] == t and event["chosen"][0]["token"] == answer["target_tokens"][t]
        assert event["top"][0][0]["token_id"] == answer["llm"]["target_token_ids"][t]  # greedy: the likeliest
        np.testing.assert_allclose(event["attention"]["cross"][0], cross[:, :, t], atol=1e-6)
        np.testing.assert_allclose(event["attention"]["decoder_self"][0], own[:, :, t, : t + 1], atol=1e-6)
        np.testing.assert_allclose(own[:, :, t, t + 1 :], 0.0)  # nothing past the step itself
    sampled = body | {"sampling": {"temperature": 0.9, "seed": 7}}
    twice = [_events(server, sampled) for _ in range(2)]
    assert [e["chosen"] for _, e in twice[0][:-1]] == [e["chosen"] for _, e in twice[1][:-1]]


def test_an_on_demand_stream_keeps_each_steps_rows_for_the_player(server: str) -> None:
    """``"attention": "on_demand"``: step events carry no rows but their own ``attention_id``;
    one head's rows by that id are the inline event's (the players fetch only the head shown)."""
    body = {"model": "en-de-llama", "text": SOURCE, "beam_size": 1, "max_length": 4, "precision": 8}
    *inline, _ = _events(server, body)
    *steps, (last, answer) = _events(server, body | {"attention": "on_demand"})
    assert last == "answer" and not answer.get("attention") and answer["attention_id"]
    assert len(steps) == len(inline)
    for t, ((_, event), (_, plain)) in enumerate(zip(steps, inline, strict=True)):
        assert "attention" not in event and event["attention_id"] != answer["attention_id"]
        shapes = event["attention_shapes"]
        assert shapes["cross"]["rows"] == 1 and shapes["decoder_self"]["columns"] == t + 1
        assert ("encoder_self" in shapes) == (t == 0)
        for kind in ("cross", "decoder_self"):
            with urllib.request.urlopen(f"{server}/api/attention/{event['attention_id']}/{kind}/1/2") as r:
                head = json.loads(r.read())
            np.testing.assert_allclose(head, np.array(plain["attention"][kind])[:, 1, 2], atol=1e-6)


def test_a_beam_stream_sends_each_steps_rows_and_the_answer_follows_their_back_pointers(server: str) -> None:
    body = {"model": "en-de-qwen3", "text": SOURCE, "beam_size": 3, "max_length": 6}
    *steps, (last, streamed) = _events(server, body)
    _, answer = post(f"{server}/api/translate", body)
    assert last == "answer" and streamed["llm"] == answer["llm"] and streamed["attention"] == answer["attention"]
    # Replay the search from the events: each row's tokens and, per step, which event row it was
    rows: list[tuple[list[int], list[int]]] = [([], [])]
    ended: list[tuple[float, list[int], list[int]]] = []
    for t, (kind, event) in enumerate(steps):
        assert kind == "step" and event["step"] == t and event["beam"] == 3
        assert len(event["top"]) == len(rows) == len(event["attention"]["cross"])
        grow = [(rows[c["parent"]][0] + [c["token_id"]], rows[c["parent"]][1] + [c["parent"]]) for c in event["chosen"]]
        ended += [(c["ranking"], *grow_one) for c in event["finished"]
                  for grow_one in [(rows[c["parent"]][0] + [c["token_id"]], rows[c["parent"]][1] + [c["parent"]])]]  # fmt: skip
        rows = grow
    ranking, tokens, path = max(ended, key=lambda e: e[0])
    assert tokens == answer["llm"]["target_token_ids"]
    cross = np.array(answer["attention"]["cross"])  # (L, H, T, S)
    for t, row in enumerate(path):  # the answer's rows are those its own hypothesis computed
        np.testing.assert_allclose(steps[t][1]["attention"]["cross"][row], cross[:, :, t], atol=1e-6)


def test_explanations_by_id_are_computed_for_an_llms_stored_answer(server: str) -> None:
    body = {"model": "en-de-llama", "text": SOURCE, "beam_size": 1, "max_length": 4, "precision": 8,
            "disable_heads": [{"kind": "decoder_self", "layer": 0, "head": 1}]}  # fmt: skip
    _, inline = post(f"{server}/api/translate", body | {"explain": ["rollout", "norm"]})
    status, kept = post(f"{server}/api/translate", body | {"attention": "on_demand"})
    assert status == 200 and kept["llm"]["target_token_ids"] == inline["llm"]["target_token_ids"]
    base = f"{server}/api/attention/{kept['attention_id']}/cross"
    status, rollout = _get(f"{base}/2?method=rollout&precision=8")
    assert status == 200, rollout
    np.testing.assert_allclose(rollout, inline["explanations"]["rollout"]["cross"][2], atol=1e-6)
    status, norm = _get(f"{base}/1/4?method=norm&precision=8")
    np.testing.assert_allclose(norm, inline["explanations"]["norm"]["cross"][1][4], atol=1e-6)
    status, err = _get(f"{base}/1?method=no_such_method")
    assert status == 422 and "no_such_method" in err["detail"]  # says why, not "unknown model"


RENDER = """async (details) => {
  const { renderAnatomy } = await import("/static/js/anatomy.js");
  const root = document.createElement("div");
  root.innerHTML = '<p data-role="anatomy-title"></p><div data-role="anatomy-body"></div>';
  document.body.append(root);
  renderAnatomy(root, details, { kind: "cross", layer: 1, head: 2, query: 1 });
  const heads = [...root.querySelectorAll("thead th")].map((th) => th.textContent);
  const cells = [...root.querySelectorAll("tbody tr")].map((tr) => [...tr.querySelectorAll("td.num")].map((td) => td.textContent));
  return { heads, cells, text: root.textContent };
}"""


def test_the_anatomy_panel_shows_an_llms_own_stages_in_chromium(server: str) -> None:
    """static/js/anatomy.js on a gemma2 answer: q·k after rotary, the soft-capped score, and a
    softmax over the *whole* causal row (equal to the weights), not over the source columns."""
    from playwright.sync_api import sync_playwright
    from test_page import CHROMIUM

    from attnscope.testing import in_own_thread

    _, a = post(f"{server}/api/translate", {"model": "en-de-gemma2", "text": SOURCE, "beam_size": 1, "max_length": 3,
                                            "return_scores": True})  # fmt: skip
    shown: dict[str, Any] = {}

    def drive() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(server + "/")
            shown.update(page.evaluate(RENDER, a))
            browser.close()

    in_own_thread(drive)
    assert "q · k" in shown["heads"] and "5·tanh(q·k ÷ 4.47 / 5) = score" in shown["heads"]
    dots, weights = a["llm"]["anatomy"]["dot"]["cross"][1][2][1], a["attention"]["cross"][1][2][1]
    assert any(d is not None for d in dots) and sum(weights) < 0.99  # a partial row, some keys attended
    for row, dot, weight in zip(shown["cells"], dots, weights, strict=True):
        if dot is None:  # a key the sliding window hides
            assert row[:3] == ["–", "masked", "–"] and weight == 0
        else:
            assert float(row[0]) == pytest.approx(dot, abs=0.006) and float(row[2]) == pytest.approx(weight, abs=6e-5)
    assert "Part of a longer row" in shown["text"] and f"sum to {sum(weights):.3f}" in shown["text"]


def test_a_prefix_ending_with_the_stop_token_is_the_whole_output(server: str) -> None:
    status, a = post(f"{server}/api/translate", {"model": "en-de-llama", "text": SOURCE, "beam_size": 2, "max_length": 8,
                                                 "prefix": "Zwei<|im_end|>"})  # fmt: skip
    assert status == 200, a
    assert a["forced_tokens"] == len(a["target_tokens"]) and a["target_tokens"][-1] == "<|im_end|>" and a["finished"]
    assert np.array(a["attention"]["cross"]).shape[2] == len(a["target_tokens"])
