"""Tiny random decoder-only Hugging Face models with a byte-level BPE tokenizer trained here (and
a chat template), saved with ``save_pretrained``: what ``attnscope import`` reads, no network.

Odd sizes everywhere: query heads != key/value heads, a sliding window of 3 positions where the
family has sliding layers (so prompts of ~30 tokens feel it), rotary scalings where the family
has them (Llama 3's on llama, linear on qwen3, Gemma 3's local base on its sliding layers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnscope.testing import TINY_PAIRS

SENTENCES = [s for pair in TINY_PAIRS for s in pair] * 3
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def save_tokenizer(folder: Path, chat: bool = True) -> Any:
    """A byte-level BPE tokenizer trained on the tiny corpus, saved as a fast HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    extra = ["Translate the following English text into German. Reply with the translation only."] * 5
    tok.train_from_iterator(SENTENCES + extra, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|im_end|>", pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE if chat else None,
    )  # fmt: skip
    hf.save_pretrained(folder)
    return hf


def _ids(tok: Any) -> dict[str, int]:
    return {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}


def _llama(tok: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}  # fmt: skip
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=42, intermediate_size=72, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rope_parameters=rope,
        tie_word_embeddings=False, **_ids(tok)))  # fmt: skip


def _mistral(tok: Any) -> Any:
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM(MistralConfig(
        vocab_size=len(tok), hidden_size=36, intermediate_size=56, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=3, head_dim=6, max_position_embeddings=256, sliding_window=3, **_ids(tok)))  # fmt: skip


def _qwen2(tok: Any) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=40, intermediate_size=64, num_hidden_layers=3, num_attention_heads=5,
        num_key_value_heads=1, max_position_embeddings=256, use_sliding_window=True, sliding_window=3,
        max_window_layers=1, tie_word_embeddings=True, **_ids(tok)))  # fmt: skip


def _qwen3(tok: Any) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    rope = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
    return Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, head_dim=10, max_position_embeddings=256, rope_parameters=rope,
        tie_word_embeddings=True, **_ids(tok)))  # fmt: skip


def _gemma2(tok: Any) -> Any:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return Gemma2ForCausalLM(Gemma2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=256, sliding_window=3, query_pre_attn_scalar=20,
        attn_logit_softcapping=5.0, final_logit_softcapping=3.0, **_ids(tok)))  # fmt: skip


def _gemma3(tok: Any) -> Any:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=12, max_position_embeddings=256, sliding_window=3, query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], **_ids(tok)))  # fmt: skip


def _gemma3_multimodal(tok: Any) -> Any:
    """Gemma 3's image + text checkpoint (Gemma3ForConditionalGeneration) around the text model
    of :func:`_gemma3`, with a one-layer SigLIP vision tower: only its text part is imported."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, SiglipVisionConfig

    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)  # fmt: skip
    config = Gemma3Config(text_config=_gemma3(tok).config, vision_config=vision, mm_tokens_per_image=4,
                          image_token_index=len(tok) - 1, boi_token_index=1, eoi_token_index=2)  # fmt: skip
    return Gemma3ForConditionalGeneration(config)


def _gpt2(tok: Any) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        vocab_size=len(tok), n_embd=36, n_layer=2, n_head=3, n_positions=128, n_inner=60,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))  # fmt: skip


LAYOUTS: dict[str, Callable[[Any], Any]] = {
    "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3, "gemma2": _gemma2,
    "gemma3_text": _gemma3, "gpt2": _gpt2,
}  # fmt: skip
# Built on demand only (not imported by the session's fixture)
EXTRA_LAYOUTS: dict[str, Callable[[Any], Any]] = {"gemma3_multimodal": _gemma3_multimodal}


def _perturb(model: torch.nn.Module, seed: int) -> None:
    """Norms away from their initial values and larger weights, so a misplaced norm, offset or
    scale shows in the logits, and attention is not uniform."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if "norm" in name or "ln_" in name else 0.05
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def build(layout: str, folder: Path, *, chat: bool = True, seed: int = 0) -> Path:
    """Save a tiny random model of ``layout`` with its tokenizer into ``folder``."""
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tok = save_tokenizer(folder, chat=chat and layout != "gpt2")
    model = {**LAYOUTS, **EXTRA_LAYOUTS}[layout](tok)
    _perturb(model, seed)
    model.eval().save_pretrained(folder)
    return folder
