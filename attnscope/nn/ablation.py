"""Switching attention heads off (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

Inside :func:`disabled_heads` the chosen heads' outputs are zeroed before the output projection
(an RNN's single attention: its context vector), in every pass and decoding step. The choice is
held by a ``ContextVar``, local to the running thread or task and never stored on a module, so two
requests sharing a model never see each other's ablation; outside the block each attention call
pays one context-variable lookup.

Heads are named as in the API: ``(kind, layer, head)`` with kind ``cross``, ``encoder_self`` or
``decoder_self``; an RNN has one head (layer 0, head 0) per attention kind it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from torch import Tensor, nn

from attnscope.nn.family import family_of, geometry_of

HeadTuple = tuple[str, int, int]  # (kind, layer, head); the API names one with serving.heads.HeadRef

_ACTIVE: ContextVar[dict[int, frozenset[int]] | None] = ContextVar("attnscope_disabled_heads", default=None)


def any_off() -> bool:
    """Whether any head is switched off in the current context."""
    return _ACTIVE.get() is not None


def heads_off(module: nn.Module) -> frozenset[int]:
    """The heads of ``module`` switched off in the current context (usually none)."""
    active = _ACTIVE.get()
    return frozenset() if active is None else active.get(id(module), frozenset())


def is_off(module: nn.Module) -> bool:
    """Whether the single head of an RNN attention ``module`` is switched off."""
    return bool(heads_off(module))


def zero_heads(module: nn.Module, out: Tensor, head_dim: int = 1) -> Tensor:
    """``out`` with the switched-off heads of ``module`` zeroed along ``head_dim``
    (e.g. per-head outputs (B, H, T, Dh); an RNN context (N, D) is one head: use ``is_off``)."""
    off = heads_off(module)
    if not off:
        return out
    keep = out.new_ones(out.size(head_dim))
    keep[list(off)] = 0.0
    shape = [1] * out.dim()
    shape[head_dim] = -1
    return out * keep.view(shape)


def attention_module(model: nn.Module, kind: str, layer: int) -> nn.Module:
    """The module computing attention ``kind`` in ``layer`` (found by the model's family,
    :mod:`attnscope.nn.family`); ValueError naming what exists."""
    config = getattr(model, "config", None)
    kinds = geometry_of(config).kinds if config is not None else ()
    if kind not in kinds:
        raise ValueError(f"this model has no {kind!r} attention; it has {', '.join(kinds) or 'none'}")
    return family_of(config).head_module(model, kind, layer)


@contextmanager
def disabled_heads(model: nn.Module, heads: Iterable[HeadTuple]) -> Iterator[None]:
    """Switch ``heads`` of ``model`` off inside the block; ValueError for a head that does not exist."""
    chosen: dict[int, set[int]] = {}
    config = getattr(model, "config", None)
    geometry = geometry_of(config) if config is not None else None
    for kind, layer, head in heads:
        module = attention_module(model, kind, layer)
        num_heads = geometry.heads_of(kind) if geometry is not None else 1
        if not 0 <= head < num_heads:
            raise ValueError(f"no head {head} in {kind} layer {layer}: the model has {num_heads} heads per layer")
        chosen.setdefault(id(module), set()).add(head)
    token = _ACTIVE.set({k: frozenset(v) for k, v in chosen.items()} or None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
