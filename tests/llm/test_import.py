"""What the import writes and refuses: the prompt template rendered as Hugging Face renders the
chat template, the card's checks, clear refusals, and a model too large for memory refused at load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from llm_builders import build, save_tokenizer

from attnscope.hf import ImportFailure
from attnscope.hf.importer import import_model
from attnscope.llm.folder import LLMFolderError, load_llm_folder
from attnscope.llm.prompt import INSTRUCTION, PromptError, fill, render_chat, token_span


def test_the_chat_template_renders_as_apply_chat_template(tmp_path: Path) -> None:
    hf = save_tokenizer(tmp_path)
    messages = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hallo {source}"}]
    special = {"bos_token": hf.bos_token, "eos_token": hf.eos_token}
    ours = render_chat(hf.chat_template, messages, special)
    assert ours == hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with pytest.raises(PromptError, match="bad role"):
        render_chat(hf.chat_template, [{"role": "robot", "content": "x"}], special)


def test_filling_a_template_finds_the_source_span() -> None:
    filled = fill(INSTRUCTION, "Der {target_language} Hund.", source_lang="en", target_lang="de")
    assert filled.text.startswith("Translate the following English text into German.")
    assert filled.text[filled.start : filled.end] == "Der {target_language} Hund."  # the source stays as typed
    assert token_span([(0, 4), (4, 9), (9, 9), (9, 12)], 5, 10) == (1, 4)
    with pytest.raises(PromptError, match="exactly one"):
        fill("{source} {source}", "x", source_lang="en", target_lang="de")


def test_the_card_holds_the_template_and_the_checks(llm_models: Path) -> None:
    card = json.loads((llm_models / "en-de-gemma2" / "card.json").read_text())
    assert card["prompt"]["kind"] == "chat" and card["prompt"]["template"].startswith("<|bos|><|im_start|>user\n")
    assert card["conversion_checks"]["float32"]["max_logit_difference"] < 1e-4
    assert card["origin"]["model_type"] == "gemma2"
    base = json.loads((llm_models / "en-de-gpt2" / "card.json").read_text())
    assert base["prompt"] == {"template": "{source_language}: {source}\n{target_language}:", "kind": "completion",
                              "add_special_tokens": True}  # fmt: skip
    config = json.loads((llm_models / "en-de-qwen2" / "config.json").read_text())["model"]
    assert config["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention"]


def test_dynamic_rotary_scaling_is_refused(tmp_path: Path) -> None:
    source = build("llama", tmp_path / "src")
    config = json.loads((source / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(ImportFailure, match="dynamic"):
        import_model(str(source), tmp_path / "out", dtype="float32")
    assert not (tmp_path / "out").exists()


def test_the_command_line_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    source = build("qwen3", tmp_path / "src")
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps(config | {"hidden_act": "relu6"}))
    done = subprocess.run([sys.executable, "-m", "attnscope.cli", "import", str(source), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0 and "relu6" in done.stderr and "Traceback" not in done.stderr


def test_a_model_larger_than_memory_is_refused_at_load(llm_models: Path) -> None:
    with pytest.raises(LLMFolderError, match="GiB of memory is available: it is not loaded"):
        load_llm_folder(llm_models / "en-de-llama", memory_limit=10_000)
    assert load_llm_folder(llm_models / "en-de-llama", memory_limit=None).config.layers == 3


def test_the_text_part_of_a_gemma3_image_text_checkpoint_is_imported(tmp_path: Path) -> None:
    """Gemma3ForConditionalGeneration: the language model is converted, checked against the
    multimodal original's own logits and attention on a text prompt, and decodes as its generate."""
    import torch
    import transformers

    from attnscope.llm.search import LLMOptions, generate

    source = build("gemma3_multimodal", tmp_path / "hf")
    import_model(str(source), tmp_path / "out", dtype="float32", pair=("en", "de"))
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    assert card["origin"]["model_type"] == "gemma3" and card["conversion_checks"]["float32"]["max_logit_difference"] < 1e-4
    original = transformers.AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager", dtype=torch.float32).eval()
    assert type(original).__name__ == "Gemma3ForConditionalGeneration"
    loaded = load_llm_folder(tmp_path / "out")
    assert loaded.config.layers == 3 and loaded.config.heads == 4 and loaded.config.kv_heads == 1
    ids = loaded.tokenizer.backend.encode("<|bos|>Two dogs play in the snow, a man rides a bike.").ids
    x = torch.tensor([ids])
    with torch.no_grad():
        theirs = original(input_ids=x, output_attentions=True)
        ours = loaded.model(x, need_weights=True)
        expected = original.generate(input_ids=x, max_new_tokens=6, do_sample=False, num_beams=1)[0, len(ids):].tolist()
    torch.testing.assert_close(ours.logits, theirs.logits, atol=1e-4, rtol=0)
    for layer, weights in enumerate(theirs.attentions):
        torch.testing.assert_close(ours.attention[0][layer], weights[0], atol=1e-5, rtol=0)
    decoded = generate(loaded.model, ids, LLMOptions(max_new_tokens=6)).tokens  # ends at the stop token, if any
    assert decoded and decoded == expected[: len(decoded)]
