"""Each imported layout against its original: logits (1e-4), every attention matrix of eager
``output_attentions`` (1e-5), and greedy and beam output tokens equal ``generate``'s on the same
prompt ids; step decoding with the cache equals the full pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from llm_builders import LAYOUTS

from attnscope.llm.folder import load_llm_folder
from attnscope.llm.prompt import fill
from attnscope.llm.search import LLMOptions, generate

SENTENCES = ["A man is riding a bicycle.", "Two dogs play in the snow."]


def _original(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def _prompt(loaded: Any, sentence: str) -> list[int]:
    prompt = loaded.card["prompt"]
    text = fill(prompt["template"], sentence, source_lang="en", target_lang="de").text
    return list(loaded.tokenizer.backend.encode(text, add_special_tokens=prompt["add_special_tokens"]).ids)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_logits_and_every_attention_matrix_equal_the_originals(
    layout: str, llm_sources: dict[str, Path], llm_models: Path
) -> None:
    original = _original(llm_sources[layout])
    loaded = load_llm_folder(llm_models / f"en-de-{layout}")
    for sentence in SENTENCES:
        ids = torch.tensor([_prompt(loaded, sentence)])
        assert ids.size(1) > 2 * (loaded.config.sliding_window or 0)  # the window masks something
        with torch.no_grad():
            theirs = original(input_ids=ids, output_attentions=True)
            ours = loaded.model(ids, need_weights=True)
        assert (ours.logits - theirs.logits).abs().max() < 1e-4
        assert ours.attention is not None
        assert ours.attention.shape[1:3] == (loaded.config.layers, loaded.config.heads)  # per query head
        for layer, matrix in enumerate(theirs.attentions):
            assert (ours.attention[:, layer] - matrix).abs().max() < 1e-5, f"layer {layer}"


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_greedy_and_beam_equal_generate(layout: str, llm_sources: dict[str, Path], llm_models: Path) -> None:
    original = _original(llm_sources[layout])
    loaded = load_llm_folder(llm_models / f"en-de-{layout}")
    stops = list(loaded.config.stop_ids)
    for sentence in SENTENCES:
        ids = _prompt(loaded, sentence)
        for beams in (1, 3):
            with torch.no_grad():
                theirs = original.generate(
                    torch.tensor([ids]), max_new_tokens=9, num_beams=beams, do_sample=False,
                    eos_token_id=stops, pad_token_id=loaded.config.pad_id,
                )[0, len(ids):].tolist()  # fmt: skip
            ours = generate(loaded.model, ids, LLMOptions(beam_size=beams, max_new_tokens=9))
            pad = loaded.config.pad_id
            assert ours.tokens == [t for t in theirs if t != pad or t in stops][: len(ours.tokens)]
            assert len(ours.tokens) == len([t for t in theirs if t != pad or t in stops])


@pytest.mark.parametrize("layout", ["qwen2", "gemma2", "gpt2"])
def test_the_generations_attention_is_the_full_pass_over_what_it_ran(layout: str, llm_models: Path) -> None:
    loaded = load_llm_folder(llm_models / f"en-de-{layout}")
    ids = _prompt(loaded, SENTENCES[0])
    for beams in (1, 2):
        out = generate(loaded.model, ids, LLMOptions(beam_size=beams, max_new_tokens=6))
        ran = torch.tensor([ids + out.tokens[:-1]])
        with torch.no_grad():
            full = loaded.model(ran, need_weights=True)
        assert out.attention is not None and full.attention is not None
        assert (out.attention - full.attention[0]).abs().max() < 1e-5
        torch.testing.assert_close(out.attention.sum(-1), torch.ones(out.attention.shape[:-1]))
