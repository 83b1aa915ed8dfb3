"""The configuration of a decoder-only language model (Llama, Qwen2/3, Gemma 2/3, GPT-2 layouts).

One frozen dataclass covers the layouts :mod:`attnscope.hf.llm_families` imports; every field
defaults to the Llama layout (pre-norm RMS, rotary positions, gated SiLU feed-forward, no biases).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from attnscope.nn.config import SharedConfig

LAYER_TYPES: tuple[str, ...] = ("full_attention", "sliding_attention")
LLM_ACTIVATIONS: tuple[str, ...] = ("silu", "gelu_tanh", "gelu")
ROPE_TYPES: tuple[str, ...] = ("default", "linear", "llama3")


@dataclass(frozen=True, kw_only=True)
class DecoderOnlyConfig(SharedConfig):
    """A decoder-only model of ``layers`` layers, ``heads`` query heads sharing ``kv_heads`` key /
    value heads (grouped-query attention: query head h reads key/value head h // (heads/kv_heads)).

    ``positions``: "rotary" (``rope_theta``, ``rope_scaling`` {"rope_type": default | linear |
    llama3, ...}; sliding layers use ``rope_local_theta`` when set, Gemma 3) or "learned" (GPT-2).
    ``norm``: "rms" or "layer"; ``norm_offset`` 1.0 is Gemma's (1 + w) RMS norm. ``sandwich_norm``:
    Gemma 2/3's extra norms after attention and feed-forward. ``query_scale``: what q·k is multiplied
    by (None: head_dim^-0.5). ``layer_types``: per layer, full or sliding-window attention (a key
    more than ``sliding_window - 1`` positions back is masked). ``attn_softcap`` /
    ``final_softcap``: Gemma 2's tanh soft-capping of attention scores / output logits.
    ``stop_ids``: every token that ends an answer (Llama 3 instruct has three)."""

    architecture: Literal["decoder_only"] = "decoder_only"
    dropout: float = 0.0
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ff_dim: int = 128
    max_positions: int = 2048
    positions: Literal["rotary", "learned"] = "rotary"
    rope_theta: float = 10000.0
    rope_local_theta: float | None = None
    rope_scaling: dict[str, Any] | None = None
    norm: Literal["rms", "layer"] = "rms"
    norm_eps: float = 1e-6
    norm_offset: float = 0.0
    sandwich_norm: bool = False
    activation: str = "silu"
    gated_ff: bool = True
    qkv_bias: bool = False
    out_bias: bool = False
    ff_bias: bool = False
    qk_norm: bool = False
    query_scale: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    attn_softcap: float | None = None
    final_softcap: float | None = None
    embed_scale: float = 1.0
    tied_output: bool = True
    stop_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "layer_types", tuple(self.layer_types) or ("full_attention",) * self.layers)
        object.__setattr__(self, "stop_ids", tuple(int(i) for i in self.stop_ids) or (self.eos_id,))
        if len(self.layer_types) != self.layers or set(self.layer_types) - set(LAYER_TYPES):
            raise ValueError(f"layer_types needs {self.layers} entries out of {', '.join(LAYER_TYPES)}")
        if "sliding_attention" in self.layer_types and not self.sliding_window:
            raise ValueError("sliding-window layers need a sliding_window")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.heads} query heads cannot share {self.kv_heads} key/value heads evenly")
        if self.activation not in LLM_ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of {', '.join(LLM_ACTIVATIONS)}")
        rope_type = (self.rope_scaling or {}).get("rope_type", "default")
        if self.positions == "rotary" and rope_type not in ROPE_TYPES:
            raise ValueError(f"rotary scaling {rope_type!r} is not one attnscope has ({', '.join(ROPE_TYPES)})")

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """One kind: the causal self-attention over prompt + output."""
        return ("decoder_self",)

    @property
    def num_heads(self) -> int:
        """Query heads per layer (each has its own attention matrix)."""
        return self.heads

    @property
    def encoder_layers(self) -> int:
        return 0

    @property
    def decoder_layers(self) -> int:
        return self.layers

    @property
    def target_positions(self) -> int | None:
        return self.max_positions

    @property
    def scale(self) -> float:
        """What q·k is multiplied by before soft-capping and softmax."""
        return self.query_scale if self.query_scale is not None else self.head_dim**-0.5

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer`` (None: it attends to every earlier position)."""
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None

    def inv_freq(self, layer: int) -> Tensor:
        """(head_dim / 2,) rotary frequencies of ``layer`` (the import overwrites them with the
        original's own, so any static scaling it computed is kept exactly)."""
        local = self.layer_types[layer] == "sliding_attention" and self.rope_local_theta is not None
        base = self.rope_local_theta if local else self.rope_theta
        assert base is not None
        dim = self.head_dim
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        scaling = {} if local else (self.rope_scaling or {})
        kind = scaling.get("rope_type", "default")
        if kind == "linear":
            return inv / float(scaling["factor"])
        if kind == "llama3":
            return _llama3(inv, scaling)
        return inv


def _llama3(inv: Tensor, s: dict[str, Any]) -> Tensor:
    """Llama 3.1's frequency scaling (long wavelengths divided by ``factor``, smoothed between)."""
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)

