"""The decoder step of an int8 Transformer as one native (C++) operation, built on first use.

At one row per step the Python step (:mod:`app.nn.decoder_step`) is ~130 small PyTorch operations
around 19 matrix products, and their dispatch costs several times the int8 products. The
operation in ``int8_step.cpp`` makes the same FBGEMM int8 calls on the same operands
(:class:`app.nn.inference.Int8Product`) and does the rest (layer norms, each head's attention,
softmaxes, residuals) as plain loops, returning the step's log-probabilities and every attention
row. It serves pre-norm Transformers quantised with ``--quantize int8`` (the opt-in int8 path); the
float path keeps the Python step, whose numbers equal the training code's bit for bit.

It is compiled with torch's extension builder (``torch.utils.cpp_extension``: a C++ compiler and
ninja; ~50 s once, then cached under ``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``). Where it cannot be built (no compiler) or ``ATTNSCOPE_NATIVE=0``,
a warning is logged once and int8 decoding takes the Python step: the same products, slower at
batch 1.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from app.nn.inference import Int8Product

if TYPE_CHECKING:
    from app.nn.decoder_step import LayerWeights

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("int8_step.cpp")
_lock = threading.Lock()
_op: list[Callable[..., Any] | None] = []  # [] until tried, then [op or None]


def enabled() -> bool:
    """False when ``ATTNSCOPE_NATIVE`` is 0/false/no/off."""
    return os.environ.get("ATTNSCOPE_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def int8_step_op() -> Callable[..., Any] | None:
    """``torch.ops.attnscope_native.int8_step``, built and loaded on the first call (None where it
    cannot be, or when switched off)."""
    if not enabled():
        return None
    with _lock:
        if not _op:
            _op.append(_load())
        return _op[0]


def _load() -> Callable[..., Any] | None:
    try:
        return torch.ops.attnscope_native.int8_step  # already loaded in this process
    except (AttributeError, RuntimeError):
        return _compiled(_build)


def _build() -> None:
    from torch.utils import cpp_extension

    if shutil.which("ninja") is None:  # the ninja wheel installs its binary beside the interpreter
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    cpp_extension.load(
        name="attnscope_native", sources=[str(SOURCE)], extra_cflags=["-O3"], is_python_module=False, verbose=False
    )


def _compiled(build: Callable[[], None]) -> Callable[..., Any] | None:
    """The operation after ``build()`` (which loads it into torch.ops), or None with a warning
    when that fails."""
    try:
        build()
        return torch.ops.attnscope_native.int8_step
    except Exception as exc:  # a missing compiler or ninja, a failed build: decode in Python
        log.warning("the native int8 step could not be built (%s); int8 decoding takes the Python step", exc)
        return None


@dataclass(frozen=True)
class NativeStep:
    """A decoder's weights as the native step takes them."""

    op: Callable[..., Any]
    heads: int
    eps: float
    norms: list[Tensor]  # per layer: self, cross, feed-forward (weight, bias); then the final norm
    products: list[Int8Product]  # per layer: qkv, self out, cross q, cross out, ff in, ff out; then the output

    def __call__(
        self, x: Tensor, caches: list[Tensor], t: int, cross: list[tuple[Tensor, Tensor]], blocked: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """x (N, D) the new positions' inputs; caches per layer (2, N, H, capacity, Dh) with room
        at position t (written in place); cross per layer (G, H, S, Dh) keys and values; blocked
        (G, S). Returns log-probabilities (N, V), self (N, L, H, t+1) and cross (N, L, H, S)
        attention."""
        p = self.products
        return self.op(
            x, caches, t, [k for k, _ in cross], [v for _, v in cross], blocked, self.norms,
            [q.weight for q in p], [q.packed for q in p], [q.col_offsets for q in p],
            [q.bias for q in p], [q.scale for q in p], [q.zero_point for q in p], self.heads, self.eps,
        )


def prepare(
    layers: list[LayerWeights] | None, final_norm: torch.nn.Module, output: Callable[[Tensor], Tensor]
) -> NativeStep | None:
    """The native step for these prepared decoder layers, their final norm and output product,
    or None when it does not apply: not every product int8, a post-norm model, or no build."""
    if not layers or not all(w.pre_norm for w in layers) or not isinstance(final_norm, torch.nn.LayerNorm):
        return None
    if any(w.eps != final_norm.eps for w in layers) or final_norm.weight is None or final_norm.bias is None:
        return None
    products: list[Any] = []
    for w in layers:
        products += [w.qkv, w.self_out, w.cross_q, w.cross_out, w.ff_in, w.ff_out]
    products.append(output)
    if not all(isinstance(p, Int8Product) for p in products):
        return None
    op = int8_step_op()
    if op is None:
        return None
    norms: list[Tensor] = []
    for w in layers:
        for pair in (w.norm_self, w.norm_cross, w.norm_ff):
            norms += [pair[0].detach().contiguous(), pair[1].detach().contiguous()]
    norms += [final_norm.weight.detach().contiguous(), final_norm.bias.detach().contiguous()]
    return NativeStep(op, layers[0].heads, layers[0].eps, norms, products)
