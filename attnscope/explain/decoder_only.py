"""Decoder-only models' explanations: the teacher-forced pass they start from (:mod:`.rollout`,
:mod:`.norm`): the prompt (``Sentence.source_ids``) and the output but its last token, read once
with attention returned, cut into the views of :mod:`attnscope.llm.views`."""

from __future__ import annotations

from typing import cast

import torch

from attnscope.explain.registry import Sentence
from attnscope.llm.views import Views, cut
from attnscope.nn.decoder_only import DecoderOnlyLM


@torch.inference_mode()
def teacher_forced(sentence: Sentence) -> tuple[Views, DecoderOnlyLM, list[int]]:
    """(the views of the pass, the model, the ids it read: prompt + output[:-1]); heads switched
    off by the caller stay off. ValueError without ``source_span`` or an output."""
    if sentence.source_span is None or not sentence.target_ids:
        raise ValueError("a decoder-only explanation needs the prompt's source span and an output")
    model = cast(DecoderOnlyLM, sentence.model)
    ids = [*sentence.source_ids, *sentence.target_ids][:-1]
    out = model(torch.tensor([ids], device=model.device), need_weights=True)
    assert out.attention is not None
    return cut(out.attention[0], len(sentence.source_ids), sentence.source_span), model, ids

