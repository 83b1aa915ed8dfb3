"""The fixed-shape decoders behind the CUDA graphs (attnscope/decoding/static_greedy.py and
static_beam.py) on the imported layouts (swish, output bias, embedding norms, learned positions),
run eagerly on the CPU: the same output as the ordinary decoders. T5 (relative position bias) is
left to the ordinary ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnscope.decoding import beam_search, greedy_decode
from attnscope.decoding import static_beam as sb
from attnscope.decoding import static_greedy as sg
from attnscope.decoding.plan import DecodeOptions
from attnscope.repository import load_model_folder
from tests.decoding.test_static_greedy import assert_same
from tests.hf.builders import KINDS


@pytest.mark.parametrize("name", ["marian", "mbart50", "t5"])
def test_fixed_shape_equals_the_ordinary_decoders(hf_models: Path, name: str) -> None:
    model = load_model_folder(hf_models / KINDS[name].model_id).model
    if name == "t5":
        assert not sg.fixed_shape_layout(model)  # type: ignore[arg-type]
        return
    assert sg.fixed_shape_layout(model)  # type: ignore[arg-type]
    c = model.config
    src = torch.randint(5, c.vocab_size - 5, (3, 9), generator=torch.Generator().manual_seed(0))
    src[:, -1] = c.eos_id
    src[1, 5], src[1, 6:] = c.eos_id, c.pad_id
    with torch.inference_mode():
        greedy = sg.static_greedy_decode(model, src, max_length=12, graphs=False)
        beam = sb.static_beam_search(model, src, DecodeOptions(beam_size=3, max_length=12), graphs=False)
        assert greedy is not None and beam is not None
        assert_same(greedy, greedy_decode(model, src, max_length=12))
        assert_same(beam, beam_search(model, src, beam_size=3, max_length=12))
