"""The shipped layout exported to a Hugging Face M2M100 and imported back: the same numbers
all the way round."""

from __future__ import annotations

import pytest
import torch

from attnscope.decoding.greedy import greedy_decode
from attnscope.hf import ImportFailure
from attnscope.hf.converters import converter_for
from attnscope.hf.export import to_m2m100
from attnscope.hf.vocab import Renumbering
from attnscope.nn.config import TransformerConfig
from attnscope.nn.transformer import Transformer


def _shipped_layout(pre_norm: bool = True) -> Transformer:
    config = TransformerConfig(
        vocab_size=60, d_model=48, heads=3, ff_dim=80, encoder_layers=3, decoder_layers=2, max_positions=40,
        dropout=0.0, pre_norm=pre_norm,
    )
    torch.manual_seed(5)
    model = Transformer(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn(p.shape) * 0.2)
            elif p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


def test_export_then_import_round_trips() -> None:
    pytest.importorskip("transformers")
    model = _shipped_layout()
    assert model.config.standard_layout
    hf_model = to_m2m100(model)
    gen = torch.Generator().manual_seed(1)
    src = torch.tensor([[*torch.randint(4, 60, (9,), generator=gen).tolist(), 3]])
    tgt = torch.tensor([[2, *torch.randint(4, 60, (6,), generator=gen).tolist()]])
    with torch.no_grad():
        ours = model(src, tgt, need_weights=True)
        theirs = hf_model(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=0, atol=1e-4)
    for layer, matrix in enumerate(theirs.cross_attentions):
        torch.testing.assert_close(ours.cross[:, layer], matrix, rtol=0, atol=1e-5)

    converter = converter_for("m2m_100")
    state, facts = converter.convert_weights(hf_model)
    numbering = Renumbering.of(pad=0, unk=1, eos=3, start=2, vocab_size=60)
    assert numbering.order == tuple(range(60)) and not numbering.copies  # attnscope's own ids
    config = TransformerConfig(vocab_size=60, tied_output=facts["tied_output"], **converter.config_fields(hf_model.config, facts["max_positions"]))
    back = Transformer(config)
    back.load_state_dict(numbering.apply(state), strict=True)
    back.eval()
    with torch.no_grad():
        again = back(src, tgt, need_weights=True)
        torch.testing.assert_close(again.logits, ours.logits, rtol=0, atol=1e-5)
        for kind in ("encoder_self", "decoder_self", "cross"):
            torch.testing.assert_close(getattr(again, kind), getattr(ours, kind), rtol=0, atol=1e-6)
        assert torch.equal(greedy_decode(back, src, max_length=8).tokens, greedy_decode(model, src, max_length=8).tokens)


def test_a_post_norm_model_does_not_export() -> None:
    pytest.importorskip("transformers")
    with pytest.raises(ImportFailure, match="pre-norm"):
        to_m2m100(_shipped_layout(pre_norm=False))
