"""The conversion checks of an import: the converted model against the original, on sentences.

For each sample sentence the original translates it greedily (``generate``); then both models
run the teacher-forced pass over that output with attention, and attnscope greedily decodes the
sentence itself. The card records the largest logit and attention differences and how many
greedy outputs were equal token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnscope.decoding.greedy import greedy_decode
from attnscope.hf.vocab import Renumbering
from attnscope.nn.config import BOS_ID
from attnscope.nn.transformer import Transformer

SAMPLES = (
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "On 3 May 2021 the museum opened at 10:30 with 42 new paintings.",
)
LOGIT_TOLERANCE = 1e-3  # float32 conversion: differences are rounding (about 1e-5)


@dataclass(frozen=True)
class Sample:
    """One sentence in both numberings: the source (with EOS) and the original's greedy output
    (without its start token, ending with EOS where it ended)."""

    source_hf: list[int]
    output_hf: list[int]


def generation_config(hf_model: Any, **settings: Any) -> Any:
    """The original's generation config set to attnscope's rules, in place (``generate`` fills
    unset fields from the model's own config, so a copy could not unset them): no EOS forced at
    the length limit, padding never produced (attnscope never emits pad or the start token), no
    sampling, repetition rules or length penalty; ``settings`` on top (e.g. ``num_beams``)."""
    config = hf_model.generation_config
    config.forced_eos_token_id = None
    config.forced_bos_token_id = None
    config.bad_words_ids = None
    config.suppress_tokens = [int(hf_model.config.pad_token_id)]
    config.begin_suppress_tokens = None
    config.no_repeat_ngram_size = 0
    config.repetition_penalty = 1.0
    config.length_penalty = 0.0
    config.do_sample = False
    config.num_beams = 1
    config.min_length = 0
    config.early_stopping = True
    for key, value in settings.items():
        setattr(config, key, value)
    if config.num_beams == 1:  # beam settings at their defaults: greedy warns about any other
        config.length_penalty, config.early_stopping = 1.0, False
    return config


def original_sample(
    hf_model: Any, hf_tokenizer: Any, text: str, max_new_tokens: int, forced: int | None = None
) -> Sample:
    """The original's tokens of ``text`` and its greedy translation (its first token ``forced``:
    a multilingual model's target language)."""
    source = list(hf_tokenizer(text).input_ids)
    config = generation_config(hf_model, max_new_tokens=max_new_tokens, forced_bos_token_id=forced)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([source]), generation_config=config)
    return Sample(source, [int(i) for i in out[0, 1:].tolist()])


def compare(hf_model: Any, model: Transformer, numbering: Renumbering, sample: Sample) -> dict[str, float]:
    """Teacher-forced logits (the original's columns in attnscope's order, copies left out) and
    every attention matrix, largest absolute differences."""
    src_hf = torch.tensor([sample.source_hf])
    start = int(hf_model.config.decoder_start_token_id)
    tgt_hf = torch.tensor([[start, *sample.output_hf]])
    with torch.no_grad():
        theirs = hf_model(input_ids=src_hf, decoder_input_ids=tgt_hf, output_attentions=True)
        src = torch.tensor([numbering.from_hf(sample.source_hf)])
        tgt = torch.tensor([[BOS_ID, *numbering.from_hf(sample.output_hf)]])
        ours = model(src, tgt, need_weights=True)
    keep = [i for i in range(len(numbering.order)) if i not in numbering.copies]
    their_logits = theirs.logits[0].index_select(-1, numbering.to_hf[keep])
    logit_diff = (ours.logits[0].float()[:, keep] - their_logits).abs().max().item()
    attention_diff = 0.0
    for kind, hf_kind in (("encoder_self", "encoder_attentions"), ("decoder_self", "decoder_attentions"), ("cross", "cross_attentions")):
        mine: Tensor = getattr(ours, kind)[0]  # (L, H, Q, K)
        other = torch.stack([a[0] for a in getattr(theirs, hf_kind)])
        attention_diff = max(attention_diff, (mine.float() - other).abs().max().item())
    return {"logits": logit_diff, "attention": attention_diff}


def greedy_equal(model: Transformer, numbering: Renumbering, sample: Sample, forced: int | None = None) -> bool:
    """Whether attnscope's greedy decoding (its first token ``forced``, if given) gives the
    original's greedy output."""
    src = torch.tensor([numbering.from_hf(sample.source_hf)])
    limit = len(sample.output_hf)
    prefix = None if forced is None else [numbering.from_hf([forced])]
    out = greedy_decode(model, src, need_weights=False, max_length=limit, prefix=prefix)
    tokens = out.tokens[0, : int(out.lengths[0])].tolist()
    return bool(tokens == numbering.from_hf(sample.output_hf))


def run_checks(
    hf_model: Any,
    hf_tokenizer: Any,
    model: Transformer,
    numbering: Renumbering,
    *,
    max_new_tokens: int = 40,
    forced: int | None = None,
) -> dict[str, Any]:
    """The checks of :mod:`attnscope.hf.checks` on :data:`SAMPLES`: the largest differences and the
    count of equal greedy outputs (``forced``: the original's id of the target language)."""
    samples = [original_sample(hf_model, hf_tokenizer, text, max_new_tokens, forced) for text in SAMPLES]
    diffs = [compare(hf_model, model, numbering, s) for s in samples]
    return {
        "sentences": len(samples),
        "max_logit_difference": max(d["logits"] for d in diffs),
        "max_attention_difference": max(d["attention"] for d in diffs),
        "greedy_equal": sum(greedy_equal(model, numbering, s, forced) for s in samples),
    }
