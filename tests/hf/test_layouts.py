"""The weight conversion of the BART lineage's other layouts (BART: post-norm with an embedding
norm and GELU; mBART: pre-norm with embedding and final norms), checked on token ids: their
tokenizers are not what the import reads yet (BART's byte-level BPE has no SentencePiece model),
but their layers already map onto attnscope's Transformer exactly."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnscope.hf.converters import converter_for
from attnscope.hf.vocab import Renumbering
from attnscope.nn.config import BOS_ID, TransformerConfig
from attnscope.nn.transformer import Transformer

ATTENTIONS = (("encoder_self", "encoder_attentions"), ("decoder_self", "decoder_attentions"), ("cross", "cross_attentions"))


def _tiny(model_type: str, tied: bool) -> Any:
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        MBartConfig,
        MBartForConditionalGeneration,
    )

    config_class, model_class = {
        "bart": (BartConfig, BartForConditionalGeneration),
        "mbart": (MBartConfig, MBartForConditionalGeneration),
    }[model_type]
    config = config_class(
        vocab_size=97, d_model=48, encoder_layers=3, decoder_layers=2, encoder_attention_heads=3,
        decoder_attention_heads=3, encoder_ffn_dim=80, decoder_ffn_dim=80, max_position_embeddings=40,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, init_std=0.3,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=model_type == "mbart",
        tie_word_embeddings=tied,
    )
    torch.manual_seed(3)
    model = model_class(config).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # away from (1, 0): a norm in the wrong place shows
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
        model.final_logits_bias.normal_(0.0, 0.5)
        if not tied:  # one embedding for both stacks (transformers 5 unties those too), an output of its own
            shared = model.model.shared.weight
            model.model.encoder.embed_tokens.weight = shared
            model.model.decoder.embed_tokens.weight = shared
            model.lm_head.weight = torch.nn.Parameter(torch.randn(shared.shape, generator=gen) * 0.3)
    return model


@pytest.mark.parametrize(("model_type", "tied"), [("bart", True), ("mbart", True), ("bart", False)])
def test_layout_converts_exactly(model_type: str, tied: bool) -> None:
    """Untied: the output layer is a matrix of its own (``tied_output=False``)."""
    pytest.importorskip("transformers")
    hf_model = _tiny(model_type, tied)
    converter = converter_for(model_type)
    state, facts = converter.convert_weights(hf_model)
    c = hf_model.config
    numbering = Renumbering.of(pad=1, unk=3, eos=2, start=2, vocab_size=c.vocab_size)
    config = TransformerConfig(
        vocab_size=len(numbering.order), tied_output=facts["tied_output"], **converter.config_fields(c, facts["max_positions"])
    )
    model = Transformer(config)
    model.load_state_dict(numbering.apply(state), strict=True)
    model.eval()
    gen = torch.Generator().manual_seed(0)
    source = [*torch.randint(4, c.vocab_size, (11,), generator=gen).tolist(), 2]
    target = torch.randint(4, c.vocab_size, (7,), generator=gen).tolist()
    with torch.no_grad():
        theirs = hf_model(
            input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([[2, *target]]), output_attentions=True
        )
        ours = model(
            torch.tensor([numbering.from_hf(source)]), torch.tensor([[BOS_ID, *numbering.from_hf(target)]]), need_weights=True
        )
    keep = [i for i in range(len(numbering.order)) if i not in numbering.copies]
    other = theirs.logits[0].index_select(-1, numbering.to_hf[keep])
    torch.testing.assert_close(ours.logits[0][:, keep], other, rtol=0, atol=1e-4)
    for kind, hf_kind in ATTENTIONS:
        for layer, matrix in enumerate(getattr(theirs, hf_kind)):
            torch.testing.assert_close(getattr(ours, kind)[0, layer], matrix[0], rtol=0, atol=1e-5)
    assert config.embedding_norm and config.pre_norm == (model_type == "mbart") and config.tied_output == tied
