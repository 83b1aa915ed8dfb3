"""The logit lens and direct logit attribution on each imported encoder–decoder (Marian's
post-norm layout, M2M100/NLLB/mBART-50 pre-norm with a final LayerNorm, T5's RMSNorm): the last
point is the model's own output and the parts add up to its logit, post-norm through every
sublayer norm frozen (the importer's parity with ``transformers`` is tests/hf/test_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from builders import KINDS

from attnscope.inside import trace as tracing
from attnscope.inside.lens import inspect, total
from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS
from attnscope.translator import Translator


@pytest.mark.parametrize("family", sorted(KINDS))
def test_lens_and_attribution_of_an_imported_model(hf_models: Path, family: str) -> None:
    loaded = load_model_folder(hf_models / KINDS[family].model_id)
    english, german = TINY_PAIRS[1]
    (result,) = Translator(loaded).align([english], [german])
    found, dla = inspect(loaded.model, result.source_ids, result.target_ids)
    src, tgt = torch.tensor([result.source_ids]), torch.tensor([result.target_ids])
    with torch.no_grad():
        logits = loaded.model(src, tracing.target_input(loaded.model, tgt)).logits[0].float()
        own = torch.log_softmax(logits, -1)
    finite = own.isfinite()  # a family may rule tokens out with -inf logits (M2M100's language codes)
    assert torch.equal(finite, found.log_probs.isfinite())
    assert (found.log_probs[finite] - own[finite]).abs().max() < 1e-5
    assert dla is not None
    written = logits.gather(-1, tgt[0][:, None])[:, 0]
    assert (total(dla) - written).abs().max() < 1e-4
    post_norm = not loaded.model.config.pre_norm
    assert (dla.norm_bias is not None) == post_norm and ("post-norm" in dla.norm) == post_norm
    if family == "marian":
        assert post_norm  # the one post-norm family here: its attribution was null before
