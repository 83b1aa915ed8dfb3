"""The logit lens, direct logit attribution and activation patching of the decoder-only LLM
translators (attnscope.inside.decoder_only), checked against ``transformers`` itself: each layer's
lens is the original's hidden state through its own final norm and lm_head, the last one is its
output distribution, the attribution's parts add up to its logit, one head (one residual
position) patched by a hook in the original moves log p by what the grid says, and every head of
a layer patched is the original with that layer's attention output from the corrupted run. Then
the same through the real server's ``/api/lens`` and ``/api/patch``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from llm_builders import LAYOUTS

from attnscope.inside import decoder_only as inside
from attnscope.inside.lens import total
from attnscope.llm.folder import load_llm_folder
from attnscope.llm.search import LLMOptions
from attnscope.llm.translator import LLMTranslator

SENTENCE = "A man is riding a bicycle."
SWAPS = [("man", "dog"), ("man", "girl"), ("bicycle", "street"), ("man", "boy"), ("riding", "running")]


def _original(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def _read_out(original: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The original's own final norm, lm_head and final soft-cap on hidden (..., D): log-probs."""
    norm = original.transformer.ln_f if hasattr(original, "transformer") else original.model.norm
    logits = original.lm_head(norm(hidden))
    cap = getattr(original.config, "final_logit_softcapping", None)
    logits = torch.tanh(logits / cap) * cap if cap else logits
    return torch.log_softmax(logits.float(), -1)


def _translated(folder: Path, sentence: str = SENTENCE, tokens: int = 5) -> tuple[LLMTranslator, list[int], list[int]]:
    translator = LLMTranslator(load_llm_folder(folder))
    result = translator.translate(sentence, LLMOptions(max_new_tokens=tokens, need_weights=False))
    return translator, translator.prompt(sentence).ids, result.target_ids


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_layers_lens_is_the_originals_hidden_state_read_out(
    layout: str, llm_sources: dict[str, Path], llm_models: Path
) -> None:
    translator, prompt, target = _translated(llm_models / f"en-de-{layout}")
    model = translator.loaded.model
    found, dla = inside.inspect(model, prompt, target, k=3)
    original = _original(llm_sources[layout])
    ids = torch.tensor([prompt + target[:-1]])
    rows = slice(len(prompt) - 1, None)
    with torch.no_grad():
        out = original(input_ids=ids, output_hidden_states=True)
        theirs = torch.log_softmax(out.logits[0, rows].float(), -1)
        layers = model.config.layers
        assert found.labels == ["embed"] + [f"{i}.{k}" for i in range(1, layers + 1) for k in ("attn", "ff")]
        for i in range(layers):  # hidden_states[i]: the residual entering layer i (0: the embeddings)
            expected = _read_out(original, out.hidden_states[i][0, rows])
            point = 0 if i == 0 else 2 * i
            ours = found.prob[point].log()
            written = expected.gather(-1, torch.tensor(target)[:, None])[:, 0]
            assert (ours - written).abs().max() < 1e-4, f"{layout} point {found.labels[point]}"
            assert found.top_ids[point, :, 0].tolist() == expected.argmax(-1).tolist()
    assert (found.log_probs - theirs).abs().max() < 1e-4  # the last point: the original's output
    with torch.no_grad():  # and our own model's output distribution, on its own forward pass
        own = torch.log_softmax(model(ids).logits[0, rows].float(), -1)
    assert (found.log_probs - own).abs().max() < 1e-5
    assert all(found.rank[-1] == (theirs > theirs.gather(-1, torch.tensor(target)[:, None])).sum(-1))
    # DLA: the parts add up to the logit (before a final soft-cap, which then gives the original's)
    assert (total(dla) - dla.logit).abs().max() < 1e-4
    assert dla.heads["self"].shape == (layers, model.config.heads, len(target)) and "cross" not in dla.heads
    written_logit = out.logits[0, rows].gather(-1, torch.tensor(target)[:, None])[:, 0]
    cap = model.config.final_softcap
    assert ((torch.tanh(dla.logit / cap) * cap if cap else dla.logit) - written_logit).abs().max() < 1e-4


def _equal_length_pair(translator: LLMTranslator) -> str:
    """SENTENCE with one word swapped so that both prompts have as many tokens."""
    length = len(translator.prompt(SENTENCE).ids)
    for word, other in SWAPS:
        corrupted = SENTENCE.replace(word, other)
        if len(translator.prompt(corrupted).ids) == length:
            return corrupted
    raise AssertionError("no swap keeps the prompt's length")


def _log_p(original: Any, ids: list[int], target: list[int], prompt: int) -> float:
    with torch.no_grad():
        logits = original(input_ids=torch.tensor([ids + target[:-1]])).logits[0, prompt - 1 :]
    return float(torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(target)[:, None]).sum())


@pytest.mark.parametrize("layout", ["llama", "gemma2"])
def test_the_grids_equal_the_original_patched_by_hooks(layout: str, llm_sources: dict[str, Path], llm_models: Path) -> None:
    translator, prompt, target = _translated(llm_models / f"en-de-{layout}")
    corrupted = translator.prompt(_equal_length_pair(translator)).ids
    differ = [p for p in range(len(prompt)) if prompt[p] != corrupted[p]]
    assert differ
    grids = inside.patch(translator.loaded.model, prompt, corrupted, target)
    same = inside.patch(translator.loaded.model, prompt, prompt, target)
    assert same.heads.abs().max() == 0 and same.positions.abs().max() == 0
    original = _original(llm_sources[layout])
    c, base = translator.loaded.config, _log_p(original, prompt, target, len(prompt))
    layer, head = 1, 2
    o_proj = original.model.layers[layer].self_attn.o_proj
    seen: list[torch.Tensor] = []
    hook = o_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    _log_p(original, corrupted, target, len(prompt))  # the donor: o_proj's input on the corrupted run
    hook.remove()

    def swap_head(module: Any, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        x, cols = args[0].clone(), slice(head * c.head_dim, (head + 1) * c.head_dim)
        x[..., cols] = seen[0][..., cols]
        return (x,)

    hook = o_proj.register_forward_pre_hook(swap_head)
    patched = _log_p(original, prompt, target, len(prompt))
    hook.remove()
    assert abs((patched - base) - float(grids.heads[layer, head])) < 1e-4
    # the residual entering layer 1 at the first differing position, from the corrupted run
    with torch.no_grad():
        donor = original(input_ids=torch.tensor([corrupted + target[:-1]]), output_hidden_states=True).hidden_states[1]

    def swap_position(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        x = args[0].clone() if args else kwargs["hidden_states"].clone()
        x[:, differ[0]] = donor[:, differ[0]]
        return ((x, *args[1:]), kwargs) if args else (args, kwargs | {"hidden_states": x})

    hook = original.model.layers[1].register_forward_pre_hook(swap_position, with_kwargs=True)
    patched = _log_p(original, prompt, target, len(prompt))
    hook.remove()
    assert abs((patched - base) - float(grids.positions[1, differ[0]])) < 1e-4
    assert grids.positions[0, [p for p in range(len(prompt)) if p not in differ]].abs().max() == 0


@pytest.mark.parametrize("layout", ["llama", "gemma2"])
def test_every_head_of_a_layer_is_that_layers_attention_output_from_the_corrupted_run(
    layout: str, llm_sources: dict[str, Path], llm_models: Path
) -> None:
    """All query heads of layer 1 from the corrupted run equal the original with its whole
    ``o_proj`` input on layer 1 taken from the corrupted run (gemma2: through its post-attention
    norm too)."""
    translator, prompt, target = _translated(llm_models / f"en-de-{layout}")
    corrupted = translator.prompt(_equal_length_pair(translator)).ids
    model, layer = translator.loaded.model, 1
    with torch.no_grad():
        donor = inside.run(model, torch.tensor([corrupted + target[:-1]])).heads[layer]
        own = inside.run(model, torch.tensor([prompt + target[:-1]])).heads[layer]
        patched = inside.run(model, torch.tensor([prompt + target[:-1]]),
                             edit=lambda i, heads: donor if i == layer else heads)  # fmt: skip
    assert (donor - own).abs().max() > 1e-3  # a real replacement
    assert patched.logits is not None
    lp = torch.log_softmax(patched.logits[0, len(prompt) - 1 :].float(), -1)
    ours = float(lp.gather(-1, torch.tensor(target)[:, None]).sum())
    original = _original(llm_sources[layout])
    o_proj = original.model.layers[layer].self_attn.o_proj
    seen: list[torch.Tensor] = []
    hook = o_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    _log_p(original, corrupted, target, len(prompt))
    hook.remove()
    hook = o_proj.register_forward_pre_hook(lambda m, args: (seen[0],))
    theirs = _log_p(original, prompt, target, len(prompt))
    hook.remove()
    assert abs(ours - theirs) < 1e-4
    assert abs(theirs - _log_p(original, prompt, target, len(prompt))) > 1e-3  # the patch changed something


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = httpx.post(url + path, json=body, timeout=120)
    return response.status_code, response.json()


def test_lens_and_patch_routes_serve_an_llm_translator(server: str) -> None:
    status, made = post(server, "/api/llm/translate", {"model": "en-de-llama", "text": SENTENCE, "max_new_tokens": 64,
                                                      "attention": False})  # fmt: skip
    assert status == 200
    status, out = post(server, "/api/lens", {"model": "en-de-llama", "text": SENTENCE, "beam_size": 1,
                                            "target": "Ein Mann fährt Rad.", "k": 2})  # fmt: skip
    assert status == 200, out
    assert out["points"][-1] == "3.ff" and len(out["rank"]) == 7 and out["source_tokens"]
    dla = out["attribution"]
    assert dla["cross_heads"] == [] and len(dla["self_heads"]) == 3 and len(dla["self_heads"][0]) == 6
    parts = [sum(h[t] for layer in dla["self_heads"] for h in layer) + sum(b[t] for b in dla["self_bias"])
             + sum(f[t] for f in dla["feed_forward"]) + dla["embeddings"][t] + dla["final_bias"][t]
             for t in range(len(out["target_tokens"]))]  # fmt: skip
    assert max(abs(p - logit) for p, logit in zip(parts, dla["logit"], strict=True)) < 1e-3
    status, own = post(server, "/api/lens", {"model": "en-de-llama", "text": SENTENCE, "beam_size": 1})
    assert status == 200 and own["translation"] == made["text"]
    assert own["target_tokens"] == made["target_tokens"]  # the lens reads what /api/llm/translate wrote
    for prob, logprob in zip(own["prob"][-1], made["token_logprobs"], strict=True):
        assert abs(prob - math.exp(logprob)) < 1e-4
    status, same = post(server, "/api/patch", {"model": "en-de-llama", "clean": SENTENCE, "corrupted": SENTENCE,
                                              "beam_size": 1})  # fmt: skip
    assert status == 200 and same["total_effect"] == 0 and same["cross_heads"] == []
    assert {v for row in same["self_heads"] + same["positions"] for v in row} == {0}
    assert len(same["positions"][0]) == len(same["clean_tokens"]) and same["position_rows"] == ["embed", "after 1", "after 2"]
    start, end = same["source_span"]
    assert "".join(same["clean_tokens"][start:end]).replace("Ġ", " ").strip().startswith("A")
    status, bad = post(server, "/api/patch", {"model": "en-de-llama", "clean": SENTENCE,
                                             "corrupted": SENTENCE + " And two more dogs run."})  # fmt: skip
    assert status == 422 and "equally long" in str(bad)
