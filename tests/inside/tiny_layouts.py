"""Tiny random Transformers of each layout the lens and patching read (the shipped pre-norm one,
T5's RMSNorm/relative-position/gated layout, BART's post-norm one), every weight random."""

from __future__ import annotations

from dataclasses import replace

import torch

from attnscope.nn.config import TransformerConfig
from attnscope.nn.factory import build_model
from attnscope.nn.transformer import Transformer

BASE = TransformerConfig(vocab_size=40, dropout=0.0, d_model=16, heads=2, ff_dim=32, encoder_layers=2, decoder_layers=2)
LAYOUTS = {
    "shipped": BASE,
    "t5": replace(BASE, norm="rms", positions="relative", linear_bias=False, scale_attention=False, gated_ff=True,
                  scale_output=True, scale_embedding=False, activation="gelu_new"),
    "bart": replace(BASE, pre_norm=False, positions="learned", embedding_norm=True, output_bias=True,
                    final_norm=False, activation="gelu", tied_output=False),
}


def tiny(layout: str, seed: int = 0) -> Transformer:
    """A tiny model of ``layout`` with every parameter random (biases and norms included)."""
    torch.manual_seed(seed)
    model = build_model(LAYOUTS[layout]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    assert isinstance(model, Transformer)
    return model

