"""A decoder self-attention key/value cache written in place.

Concatenating each step's keys and values onto the cache (``torch.cat``) copies the whole cache
every step. Here one buffer ``(2, N, H, capacity, Dh)`` (keys then values) holds room for more
positions than are filled; a step writes its new position in place and reads a view of the filled
part. When the buffer is full it is replaced by one with ``GROWTH`` more positions (one copy every
``GROWTH`` steps); :meth:`KVCache.select` (beam search's parent choice, finished sentences leaving)
copies the chosen rows into a new buffer, as before, and :func:`select_all` does that for every
layer's cache in one native operation where it can.

A cache value behaves like an immutable one: appending to a cache that something else has already
extended (two steps taken from one state, e.g. a caller exploring alternatives) copies the filled
part first instead of overwriting what the other holder sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnscope.nn import native

GROWTH = 16  # positions added each time a buffer is full


@dataclass
class _Buffer:
    """The storage: data (2, N, H, capacity, Dh) and how many positions of it are written."""

    data: Tensor
    filled: int = 0


@dataclass
class KVCache:
    """The keys and values of the first ``length`` positions of N rows. ``buffer.data`` is
    (2, N, H, capacity, Dh); this cache's part is ``[:, :, :, :length]``."""

    buffer: _Buffer | None = None
    length: int = 0
    _views: tuple[Tensor, Tensor] | None = field(default=None, repr=False)

    @property
    def keys(self) -> Tensor:
        """(N, H, length, Dh)."""
        return self.pair()[0]

    @property
    def values(self) -> Tensor:
        """(N, H, length, Dh)."""
        return self.pair()[1]

    def pair(self) -> tuple[Tensor, Tensor]:
        """Keys and values, each (N, H, length, Dh), views of the buffer."""
        if self.buffer is None:
            raise ValueError("the cache is empty")
        if self._views is None:
            part = self.buffer.data[:, :, :, : self.length]
            self._views = (part[0], part[1])
        return self._views

    def append(self, kv: Tensor) -> KVCache:
        """kv: (2, N, H, T, Dh) the keys and values of T new positions. Returns the cache of
        ``length + T`` positions (sharing this one's buffer when that is safe)."""
        two, rows, heads, new, dim = kv.shape
        buffer, end = self.buffer, self.length + new
        if buffer is None or buffer.filled != self.length or end > buffer.data.size(3):
            data = kv.new_empty(two, rows, heads, end + GROWTH, dim)
            if buffer is not None and self.length:
                data[:, :, :, : self.length] = buffer.data[:, :, :, : self.length]
            buffer = _Buffer(data, self.length)
        buffer.data[:, :, :, self.length : end] = kv
        buffer.filled = end
        return KVCache(buffer, end)

    def reserve(self, like: Tensor, rows: int, heads: int, dim: int) -> KVCache:
        """The cache of ``length + 1`` positions whose last one is not written yet: the caller
        writes it in place, at ``buffer.data[:, :, :, length]`` (the native step does). The
        buffer is this one's when that is safe, as in :meth:`append`; a new one is made like
        ``like`` (dtype, device), contiguous."""
        buffer, end = self.buffer, self.length + 1
        if buffer is None or buffer.filled != self.length or end > buffer.data.size(3):
            data = like.new_empty(2, rows, heads, end + GROWTH, dim)
            if buffer is not None and self.length:
                data[:, :, :, : self.length] = buffer.data[:, :, :, : self.length]
            buffer = _Buffer(data, self.length)
        buffer.filled = end
        return KVCache(buffer, end)

    def select(self, indices: Tensor) -> KVCache:
        """A cache of the rows ``indices`` (N',) of this one, in a buffer of its own (its room
        for more positions kept)."""
        if self.buffer is None:
            return KVCache()
        old = self.buffer.data
        if old.requires_grad and torch.is_grad_enabled():  # out= below is not differentiable
            return KVCache(_Buffer(old.index_select(1, indices), self.length), self.length)
        two, _, heads, capacity, dim = old.shape
        data = old.new_empty(two, indices.numel(), heads, capacity, dim)
        filled = data[:, :, :, : self.length]
        torch.index_select(old[:, :, :, : self.length], 1, indices, out=filled)  # the filled part only
        return KVCache(_Buffer(data, self.length), self.length)

    @staticmethod
    def of(keys: Tensor, values: Tensor) -> KVCache:
        """A cache holding keys and values (N, H, T, Dh) (a teacher-forced pass's)."""
        return KVCache().append(torch.stack([keys, values]))


def select_all(caches: list[KVCache], indices: Tensor) -> list[KVCache]:
    """``[c.select(indices) for c in caches]``: the same buffers' contents, in one native
    operation (:mod:`attnscope.nn.native`'s ``select_rows``) where it applies (built, every buffer
    contiguous on the CPU with no gradient, CPU indices); three layers' ``select`` cost beam
    search ~90 us a step at one sentence."""
    namespace = native.built()
    buffers = [c.buffer for c in caches]
    if (
        namespace is None
        or indices.device.type != "cpu"
        or any(
            b is None or b.data.device.type != "cpu" or not b.data.is_contiguous() or b.data.requires_grad
            for b in buffers
        )
    ):
        return [c.select(indices) for c in caches]
    lengths = [c.length for c in caches]
    data = namespace.select_rows([b.data for b in buffers if b is not None], indices.long(), lengths)
    return [KVCache(_Buffer(d, n), n) for d, n in zip(data, lengths, strict=True)]
