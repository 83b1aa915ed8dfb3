"""The resident models under a bound (attnscope.engine.residency), without a server: one load
per model however many ask for it at once, a held model never unloaded, a load that waits for
room, a deadline that answers "loading", and the byte budget beside the count. Over HTTP:
tests/serving/test_bounded_models.py."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from attnscope.engine.errors import Unavailable
from attnscope.engine.residency import Residency

T = TypeVar("T")


def run_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own: the browser tests' Playwright keeps an event loop
    running in the main thread (a full run), where asyncio.run() refuses to start another."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


class Loads:
    """A loader that counts its calls and can be held until released."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, folder: Path) -> str:
        self.calls[folder.name] += 1
        self.release.wait(10)
        return f"model {folder.name}"


def _residency(bound: int, loads: Loads, names: str = "abc") -> Residency[str]:
    residency: Residency[str] = Residency(bound, loads, str)
    residency.folders = {name: Path(name) for name in names}
    return residency


def test_concurrent_requests_for_one_model_load_it_once() -> None:
    loads = Loads()
    loads.release.clear()  # every request arrives while the load is under way
    residency = _residency(1, loads)

    async def many() -> list[str]:
        waiting = [asyncio.create_task(residency.acquire("b", timeout_s=20)) for _ in range(8)]
        await asyncio.sleep(0.1)
        assert residency.state("b") == "loading"
        loads.release.set()
        return await asyncio.gather(*waiting)

    threads = [threading.Thread(target=lambda: residency.pinned("b").__enter__()) for _ in range(4)]
    for t in threads:
        t.start()
    assert run_loop(many()) == ["model b"] * 8
    for t in threads:
        t.join(10)
    assert loads.calls == {"b": 1}


def test_a_model_in_use_is_never_unloaded_and_a_load_waits_for_room() -> None:
    """A held model stays; another model's load waits until a hold ends instead of going over
    the bound (issue 45.3: memory was bounded by nothing while every model was in use)."""
    loads = Loads()
    residency = _residency(1, loads)
    with residency.pinned("a") as model:
        assert model == "model a"
        with pytest.raises(Unavailable, match="model b is loading"):
            run_loop(residency.acquire("b", timeout_s=0.2))  # no room while "a" decodes
        assert set(residency.resident) == {"a"} and residency.state("b") == "loading"
        assert loads.calls == {"a": 1}  # "b" waits for room, unloaded nothing, loaded nothing
    # the hold ended: the waiting load starts at once, unloading "a" first
    assert run_loop(residency.acquire("b", timeout_s=10)) == "model b"
    assert set(residency.resident) == {"b"}
    with residency.pinned("c"):  # nothing held: "b" makes room before "c" loads
        assert set(residency.resident) == {"c"}
    assert loads.calls == {"a": 1, "b": 1, "c": 1}


def test_waiting_past_the_deadline_is_503_model_is_loading() -> None:
    loads = Loads()
    loads.release.clear()
    residency = _residency(1, loads)
    with pytest.raises(Unavailable, match="model c is loading") as caught:
        run_loop(residency.acquire("c", timeout_s=0.05))
    assert caught.value.retry_after_s == 2
    loads.release.set()


def test_the_byte_budget_bounds_what_is_loaded_beside_the_count() -> None:
    """``ATTNSCOPE_MAX_LOADED_BYTES``: a load costs its weights' bytes; under a budget of 100,
    "a" (60) and "b" (60) never stay together although the count would allow three, while
    "b" and "c" (30) do; a held model is still never unloaded for a load, which waits."""
    loads = Loads()
    costs = {"a": 60, "b": 60, "c": 30}
    residency: Residency[str] = Residency(3, loads, str, max_bytes=100, cost=lambda folder: costs[folder.name])
    residency.folders = {name: Path(name) for name in "abc"}
    with residency.pinned("a"):
        with pytest.raises(Unavailable):
            run_loop(residency.acquire("b", timeout_s=0.2))  # 120 > 100 while "a" is held
        assert set(residency.resident) == {"a"}
    assert run_loop(residency.acquire("b", timeout_s=10)) == "model b"  # "a" unloaded for it
    assert set(residency.resident) == {"b"}
    assert run_loop(residency.acquire("c", timeout_s=10)) == "model c"
    assert set(residency.resident) == {"b", "c"} and residency.bytes_taken() == 90
    assert loads.calls == {"a": 1, "b": 1, "c": 1}


class _Cyclic:
    """A loaded model that, like a Transformer, holds a reference cycle: dropping it frees
    nothing until the collector runs."""

    def __init__(self, name: str) -> None:
        self.name, self.me = name, self


def test_an_unloaded_model_is_freed_before_the_next_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45.3: the memory of unloaded models stayed with the process. Each load after an
    unload first collects the unloaded model (cycles included, with the collector's automatic
    runs off, as a quiet server may go long without one) and hands the freed memory back to the
    OS (malloc_trim, counted here), so a load never allocates beside the one it replaces."""
    import gc
    import weakref

    from attnscope.engine import residency as residency_module

    trims: list[int] = []
    monkeypatch.setattr(residency_module, "release_freed_memory", lambda: trims.append(1) or True)
    refs: dict[str, weakref.ref[_Cyclic]] = {}
    alive_at_load: list[list[str]] = []

    def load(folder: Path) -> _Cyclic:
        alive_at_load.append(sorted(n for n, r in refs.items() if r() is not None))
        model = _Cyclic(folder.name)
        refs[folder.name] = weakref.ref(model)
        return model

    residency: Residency[_Cyclic] = Residency(1, load, _Cyclic)
    residency.folders = {name: Path(name) for name in "abc"}
    gc.disable()
    try:
        for name in "abc":
            with residency.pinned(name) as model:
                assert model.name == name
            del model
    finally:
        gc.enable()
    assert alive_at_load == [[], [], []]  # before: [[], ["a"], ["b"]]
    assert len(trims) == 2 and residency.unloads == 2
