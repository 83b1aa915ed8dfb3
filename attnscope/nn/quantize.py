"""Opt-in int8 inference on the CPU: the linear layers' products in int8.

``quantize(model, "int8")`` turns every ``nn.Linear`` into an :class:`Int8Linear` (the same
parameters) whose products while decoding are FBGEMM's int8 ones
(:func:`attnscope.nn.inference.int8_product`: each weight row quantised once on its own scale, the
activations on each call from their own range, fp32 in and out), and for the Transformer gives
the tied output projection an int8 copy of the embedding matrix too (the largest product of a
decoding step). Being linear layers, they go through the decoders' fast paths as the float ones
do: the self-attention query/key/value and the cross-attention keys/values fused into one product
each. A pre-norm Transformer's encoder and decoder step then run as native operations
(:mod:`attnscope.nn.native`), built here, once: parameters changed after quantising are not seen by
them. Attention weights, softmaxes, layer norms and embeddings stay fp32, so every attention
matrix is still returned. The result is for inference only (with gradients recorded an
Int8Linear multiplies its fp32 weight) and runs on the CPU only; the fp32 parameters are kept
beside the int8 copies. Chosen with ``ATTNSCOPE_QUANTIZE=int8`` (serving) or ``--quantize int8``
(``attnscope serve`` and ``evaluate``); how much it changes BLEU and speed is in docs/findings.md.

Until 2026-11 this was torch.ao's ``quantize_dynamic``; its Linear wraps the same FBGEMM kernel in
quantised-tensor objects that cost ~20 us a call, which at one row is more than the product.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn

from attnscope.nn import inference
from attnscope.nn.base import Seq2Seq

Quantization = Literal["int8"]
QUANTIZATIONS: tuple[str, ...] = ("int8",)


class Int8Linear(nn.Linear):
    """A linear layer whose products while decoding are int8 (:mod:`attnscope.nn.inference` builds and
    caches them from the fp32 parameters); with gradients recorded, the fp32 product."""

    int8 = True

    def forward(self, x: Tensor) -> Tensor:
        if inference.decoding():
            return inference.product(self, "linear", (self,))(x)
        return super().forward(x)

    @classmethod
    def of(cls, layer: nn.Linear) -> Int8Linear:
        """An Int8Linear with ``layer``'s parameters (shared, not copied)."""
        new = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
        new.weight = layer.weight
        new.bias = layer.bias
        new.train(layer.training)
        return new


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
        output = nn.Linear(embed.embedding_dim, embed.num_embeddings, bias=False, device="meta")
        output.weight = embed.weight  # shared: the int8 copy is derived from it
        model.quantized_output = output  # becomes int8 below, with the other linear layers
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear.of(child))
    native_parts = getattr(model, "native_parts", None)
    if native_parts is not None:  # a Transformer: build its native step now, not in a request
        native_parts()
    return model
