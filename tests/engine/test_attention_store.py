"""The attention store alone: LRU eviction by bytes, expiry by idle time, the bound kept under
threads, ids that name their process, and explanations counted in an entry's bytes."""

from __future__ import annotations

import threading

import pytest
import torch

from attnscope.engine.attention_store import AttentionStore, NotStored, Recorded, TooLarge


def entry(floats: int) -> Recorded:
    """An entry of exactly ``floats`` float32 weights (4 bytes each)."""
    return Recorded(model="m", attention={"cross": torch.rand(1, 1, 1, floats)})


def test_least_recently_used_goes_first() -> None:
    store = AttentionStore(max_bytes=3 * 400, max_seconds=60)
    a, b, c = (store.put(entry(100)) for _ in range(3))
    store.get(a)  # a is now the most recent: b is the oldest
    d = store.put(entry(100))
    with pytest.raises(NotStored, match="translate again"):
        store.get(b)
    for kept in (a, c, d):
        store.get(kept)
    assert store.used_bytes == 1200 and store.evicted == 1


def test_an_entry_larger_than_the_store_is_refused() -> None:
    store = AttentionStore(max_bytes=100, max_seconds=60)
    with pytest.raises(TooLarge):
        store.put(entry(26))  # 104 bytes
    assert len(store) == 0 and store.used_bytes == 0


def test_entries_expire_when_not_read() -> None:
    now = [0.0]
    store = AttentionStore(max_bytes=10_000, max_seconds=10, clock=lambda: now[0])
    old, fresh = store.put(entry(10)), store.put(entry(10))
    now[0] = 8.0
    store.get(fresh)  # read: its ten seconds start again
    now[0] = 12.0
    assert store.get(fresh).model == "m"
    with pytest.raises(NotStored, match="expired"):
        store.get(old)
    assert store.used_bytes == 40


def test_an_id_names_its_worker() -> None:
    one, other = AttentionStore(10_000, 60), AttentionStore(10_000, 60)
    made = other.put(entry(1))
    assert made.startswith(other.worker + "-")
    with pytest.raises(NotStored, match=f"recorded by worker {other.worker}.*sticky routing"):
        one.get(made)
    with pytest.raises(NotStored, match="not stored"):
        one.get("garbage")


def test_explanations_count_and_make_room() -> None:
    store = AttentionStore(max_bytes=900, max_seconds=60)
    first, second = store.put(entry(100)), store.put(entry(100))
    store.attach(second, "rollout", {"cross": torch.rand(1, 1, 50)})  # 200 bytes more: first goes
    assert store.used_bytes == 600
    assert store.get(second).nbytes == 600
    with pytest.raises(NotStored):
        store.get(first)
    store.attach(second, "norm", {"cross": torch.rand(1, 1, 1, 200)})  # would pass the bound: dropped
    assert "norm" not in store.get(second).explained and store.used_bytes == 600


def test_the_bound_holds_under_threads() -> None:
    store = AttentionStore(max_bytes=10_000, max_seconds=60)
    ids: list[str] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                ids.append(store.put(entry(50 + (n * 7 + i) % 400)))
                store.get(ids[-1]) if i % 3 else None
        except NotStored:
            pass  # another thread's put may evict it before the read: that is allowed
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.peak_bytes <= store.max_bytes
    held = sum(store.get(i).nbytes for i in ids if _held(store, i))
    assert held == store.used_bytes <= store.max_bytes
    assert store.evicted == len(ids) - len(store) > 0


def _held(store: AttentionStore, attention_id: str) -> bool:
    try:
        store.get(attention_id)
        return True
    except NotStored:
        return False
