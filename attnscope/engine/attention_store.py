"""The attention store: what a decode recorded, kept in this process for ``"attention": "on_demand"``.

An on-demand answer carries no matrices, only an ``attention_id`` and each kind's shape; the
matrices stay here, as the decoder recorded them (``[layers][heads][query][key]`` per kind, on
the CPU, in the model's dtype, never rounded), and ``GET /api/attention/...`` reads them back
(``attnscope.serving.attention_api``). Explanations asked for later by the same id are computed
from the recorded source and target ids and kept beside them (:meth:`AttentionStore.attach`).

The store is bounded twice: in bytes (``ATTNSCOPE_ATTENTION_STORE_BYTES``: the tensors' bytes,
explanations included; least recently used entries are evicted first to make room, under one
lock, so the count never passes the bound however many requests store at once) and in time
(``ATTNSCOPE_ATTENTION_STORE_SECONDS``: an entry not read for that long is dropped). One store
per process: an id names the process that made it (:attr:`AttentionStore.worker`), so another
process can say "wrong worker" rather than "unknown". Nothing here imports the web."""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from attnscope.engine.heads import HeadRef
from attnscope.engine.schemas import AttentionKind, AttentionShape
from attnscope.nn.config import ModelConfig
from attnscope.nn.family import geometry_of
from attnscope.translator import Translation

_WORKER = re.compile(r"[0-9]+[0-9a-f]{4}")  # an id's first part: the process id and 4 random hex digits


class NotStored(LookupError):
    """The id is unknown here: evicted, expired, never made, or made by another process
    (``other_worker``: that process's name, parsed from the id)."""

    def __init__(self, attention_id: str, *, worker: str, other_worker: str | None) -> None:
        self.attention_id, self.other_worker = attention_id, other_worker
        if other_worker is not None and other_worker != worker:
            message = (
                f"attention {attention_id!r} was recorded by worker {other_worker}, and this request reached "
                f"worker {worker}: each server process keeps its own attention, so route /api/attention requests "
                "to the worker named in the id (sticky routing), or translate again"
            )
        else:
            message = (
                f"attention {attention_id!r} is not stored (it expired, was evicted to make room, or never "
                "existed): translate again to record it"
            )
        super().__init__(message)


class TooLarge(ValueError):
    """One entry larger than the whole store (admission refuses such requests before decoding)."""


@dataclass
class Recorded:
    """One answer's recorded attention: ``attention[kind]`` is (L, H, Q, K) as in an inline
    answer; the ids (source with EOS, target as answered) let an explanation be computed later
    under the same ``disabled`` heads; ``explained`` caches what was computed, by method."""

    model: str
    attention: dict[str, torch.Tensor]
    source_ids: tuple[int, ...] = ()
    target_ids: tuple[int, ...] = ()
    disabled: tuple[tuple[str, int, int], ...] = ()
    explained: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    last_used: float = 0.0
    # A decoder-only model's answer: source_ids are its whole prompt, this the source's [start, end)
    source_span: tuple[int, int] | None = None

    @property
    def nbytes(self) -> int:
        tensors = [*self.attention.values(), *(t for m in self.explained.values() for t in m.values())]
        return sum(t.numel() * t.element_size() for t in tensors)

    def shapes(self) -> dict[str, dict[str, int]]:
        """Each kind's ``layers``, ``heads``, ``rows`` (queries) and ``columns`` (keys)."""
        return {kind: dict(zip(("layers", "heads", "rows", "columns"), t.shape, strict=True)) for kind, t in self.attention.items()}


def kept(weights: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """The kinds recorded, each copied compactly to the CPU (a view would keep its whole
    parent alive, and the store would count less than it holds). (L, H, Q, K) each."""
    return {kind: t.detach().to("cpu").clone() for kind, t in weights.items() if t is not None}


def stored_bytes(config: ModelConfig, source_lengths: list[int], budgets: list[int], *, element: int = 4) -> int:
    """An upper bound of what storing each text's answer takes: every kind the model has, for
    source ``s`` and output ``t`` tokens (at most its budget), ``element`` bytes a weight."""
    g = geometry_of(config)
    total = 0
    for s, t in zip(source_lengths, budgets, strict=True):
        per_head = g.decoder_layers * g.heads
        sizes = {"cross": per_head * t * s, "decoder_self": per_head * t * t, "encoder_self": g.encoder_layers * g.heads * s * s}
        total += sum(sizes[kind] for kind in g.kinds)
    return total * element


class AttentionStore:
    """A per-process LRU of :class:`Recorded`, bounded in bytes and idle seconds; thread-safe."""

    def __init__(self, max_bytes: int, max_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes, self.max_seconds, self.clock = max_bytes, max_seconds, clock
        self.worker = f"{os.getpid()}{secrets.token_hex(2)}"  # a restarted process with the same pid differs
        self._entries: OrderedDict[str, Recorded] = OrderedDict()
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.peak_bytes = 0  # the most the store ever held: never above max_bytes
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, recorded: Recorded) -> str:
        """Keep ``recorded``; its id. Older entries go first (expired, then least recently used)
        until it fits; :class:`TooLarge` if it cannot fit even in an empty store."""
        size = recorded.nbytes
        if size > self.max_bytes:
            raise TooLarge(f"{size} bytes of attention, over the store's {self.max_bytes} (ATTNSCOPE_ATTENTION_STORE_BYTES)")
        attention_id = f"{self.worker}-{secrets.token_hex(8)}"
        with self._lock:
            now = self.clock()
            self._expire(now)
            self._make_room(size)
            recorded.last_used = now
            self._entries[attention_id] = recorded
            self._grow(size)
        return attention_id

    def get(self, attention_id: str) -> Recorded:
        """The entry (now the most recently used); :class:`NotStored` if it is not here."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            found = self._entries.get(attention_id)
            if found is None:
                maker = attention_id.split("-")[0]
                other = maker if _WORKER.fullmatch(maker) else None
                raise NotStored(attention_id, worker=self.worker, other_worker=other)
            found.last_used = now
            self._entries.move_to_end(attention_id)
            return found

    def attach(self, attention_id: str, method: str, values: dict[str, torch.Tensor]) -> None:
        """Keep an explanation computed for an entry (counted in its bytes; other entries make
        room). Dropped silently when the entry has gone meanwhile or it would not fit."""
        values = kept(dict(values))
        size = sum(t.numel() * t.element_size() for t in values.values())
        with self._lock:
            entry = self._entries.get(attention_id)
            if entry is None or method in entry.explained or entry.nbytes + size > self.max_bytes:
                return
            self._entries.move_to_end(attention_id)
            self._make_room(size, keep=attention_id)
            entry.explained[method] = values
            self._grow(size)

    def _grow(self, size: int) -> None:
        self.used_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)

    def _expire(self, now: float) -> None:
        while self._entries:
            key, oldest = next(iter(self._entries.items()))
            if now - oldest.last_used <= self.max_seconds:
                return
            self._drop(key)

    def _make_room(self, size: int, keep: str | None = None) -> None:
        for key in list(self._entries):
            if self.used_bytes + size <= self.max_bytes:
                return
            if key != keep:
                self._drop(key)

    def _drop(self, key: str) -> None:
        self.used_bytes -= self._entries.pop(key).nbytes
        self.evicted += 1


def on_demand_fields(
    store: AttentionStore, model: str, result: Translation, disabled: Sequence[HeadRef] = ()
) -> dict[str, Any]:
    """An on-demand answer's ``attention_id`` and ``attention_shapes``: the result's recorded
    attention (every kind it has) put in ``store`` with what an explanation needs later."""
    hyp = result.hypothesis
    recorded = Recorded(
        model=model,
        attention=kept({kind: getattr(hyp, kind, None) for kind in ("cross", "encoder_self", "decoder_self")}),
        source_ids=tuple(result.source_ids),
        target_ids=tuple(result.target_ids),
        disabled=tuple((h.kind, h.layer, h.head) for h in disabled),
    )
    shapes = {cast(AttentionKind, kind): AttentionShape(**shape) for kind, shape in recorded.shapes().items()}
    return {"attention_id": store.put(recorded), "attention_shapes": shapes}
