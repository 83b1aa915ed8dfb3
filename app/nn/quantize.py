"""Opt-in int8 inference on the CPU: torch's dynamic quantisation of the linear layers.

``quantize(model, "int8")`` replaces every ``nn.Linear`` by its dynamically quantised version
(int8 weights, activations quantised per batch on the fly, fp32 in and out) and, for the
Transformer, gives the tied output projection an int8 copy of the embedding matrix too (the
largest product of a decoding step). Attention weights, softmaxes, layer norms and embeddings stay
fp32, so every attention matrix is still returned. The result is for inference only (no training,
no saving) and runs on the CPU only. Chosen with ``ATTNSCOPE_QUANTIZE=int8`` (serving) or
``--quantize int8`` (``attnscope serve`` and ``evaluate``); how much it changes BLEU and speed is
in the README.
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
from torch import nn

from app.nn.base import Seq2Seq

Quantization = Literal["int8"]
QUANTIZATIONS: tuple[str, ...] = ("int8",)


def quantize(model: Seq2Seq, mode: str) -> Seq2Seq:
    """Quantise ``model`` in place (eval mode, CPU) and return it; ValueError for an unknown
    mode or a model on another device."""
    if mode not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {mode!r}; choose one of {', '.join(QUANTIZATIONS)}")
    if model.device.type != "cpu":
        raise ValueError(f"{mode} quantization runs on the CPU only, not on {model.device}")
    model.eval()
    embed = getattr(model, "embed", None)
    if hasattr(model, "quantized_output") and isinstance(embed, nn.Embedding):
        output = nn.Linear(embed.embedding_dim, embed.num_embeddings, bias=False)
        with torch.no_grad():
            output.weight.copy_(embed.weight)
        model.quantized_output = output  # becomes int8 below, with the other linear layers
    with warnings.catch_warnings():  # torch.ao's eager quantisation is marked deprecated (torchao
        # succeeds it, a separate package); it is what this torch ships and still works
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")
        torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return model
