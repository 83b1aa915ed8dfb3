"""The micro-batching scheduler on its own (real event loop, real worker threads, a runner that
records its batches): requests behind a running batch of their own settings wait for it and then
decode as one batch, while other settings take a free slot at once, and a group that fills up
starts without waiting, as does one that has gathered ``parallel_texts``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

from attnscope.engine.batching import Scheduler, Ticket

WINDOW_S = 0.002


def ticket(text: str) -> Ticket:
    return Ticket(texts=[text], budgets=[1], deadline=time.monotonic() + 60, timeout_s=60)


class Recorder:
    """A runner that notes each batch it gets (key, texts); the first batch of ``hold`` waits
    for ``release`` before it answers."""

    def __init__(self, hold: Hashable) -> None:
        self.hold = hold
        self.release = threading.Event()
        self.batches: list[tuple[Hashable, list[str]]] = []
        self._lock = threading.Lock()

    def __call__(self, key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]) -> list[str]:
        with self._lock:
            self.batches.append((key, [t.texts[0] for t in tickets]))
            first_held = [k for k, _ in self.batches].count(self.hold) == 1 and key == self.hold
        if first_held:
            assert self.release.wait(30), "the test never released the held batch"
        return [t.texts[0] for t in tickets]


async def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.001)


def run(test: Callable[[Scheduler, Recorder], object], *, max_texts: int, parallel_texts: int | None = None) -> None:
    recorder = Recorder(hold="a")
    with ThreadPoolExecutor(2) as pool:
        scheduler = Scheduler(
            pool, slots=2, max_queue=16, window_s=WINDOW_S, max_texts=max_texts, parallel_texts=parallel_texts
        )
        try:
            # In a thread of its own: the browser tests' Playwright keeps an event loop running
            # in the main thread, where asyncio.run() refuses to start another.
            with ThreadPoolExecutor(1) as main:
                main.submit(asyncio.run, test(scheduler, recorder)).result()  # type: ignore[arg-type]
        finally:
            recorder.release.set()  # a failed check leaves no thread waiting


def test_requests_behind_a_running_batch_of_their_settings_wait_and_decode_together() -> None:
    async def scenario(scheduler: Scheduler, recorder: Recorder) -> None:
        first = asyncio.create_task(scheduler.submit("a", ticket("a1"), recorder))
        await until(lambda: len(recorder.batches) == 1)
        later = [asyncio.create_task(scheduler.submit("a", ticket(f"a{i}"), recorder)) for i in (2, 3, 4)]
        other = await scheduler.submit("b", ticket("b1"), recorder)
        assert other == "b1", "other settings took the free slot while a's batch ran"
        await asyncio.sleep(50 * WINDOW_S)
        assert [k for k, _ in recorder.batches] == ["a", "b"], "a2-a4 started beside a running batch of a"
        assert scheduler.queued == 3 and scheduler.running == 1
        recorder.release.set()
        assert await first == "a1"
        assert [await t for t in later] == ["a2", "a3", "a4"]
        assert recorder.batches[2] == ("a", ["a2", "a3", "a4"]), "they waited, then decoded as one batch"

    run(scenario, max_texts=8)


def test_a_full_group_starts_beside_a_running_batch_of_its_settings() -> None:
    async def scenario(scheduler: Scheduler, recorder: Recorder) -> None:
        first = asyncio.create_task(scheduler.submit("a", ticket("a1"), recorder))
        await until(lambda: len(recorder.batches) == 1)
        later = [asyncio.create_task(scheduler.submit("a", ticket(f"a{i}"), recorder)) for i in (2, 3, 4)]
        assert [await t for t in later] == ["a2", "a3", "a4"], "a full group (max_texts) need not wait"
        assert recorder.batches[1] == ("a", ["a2", "a3", "a4"]) and not first.done()
        recorder.release.set()
        assert await first == "a1"

    run(scenario, max_texts=3)


def test_a_group_of_parallel_texts_starts_beside_a_running_batch_and_a_smaller_one_waits() -> None:
    async def scenario(scheduler: Scheduler, recorder: Recorder) -> None:
        first = asyncio.create_task(scheduler.submit("a", ticket("a1"), recorder))
        await until(lambda: len(recorder.batches) == 1)
        second = asyncio.create_task(scheduler.submit("a", ticket("a2"), recorder))
        await asyncio.sleep(50 * WINDOW_S)
        assert len(recorder.batches) == 1 and scheduler.queued == 1, "one text (< parallel_texts) went beside a1"
        third = asyncio.create_task(scheduler.submit("a", ticket("a3"), recorder))
        done = await asyncio.wait_for(asyncio.gather(second, third), timeout=10)  # a TimeoutError: they waited
        assert done == ["a2", "a3"]
        assert recorder.batches[1] == ("a", ["a2", "a3"]) and not first.done(), "not beside the running a1"
        recorder.release.set()
        assert await first == "a1"

    run(scenario, max_texts=8, parallel_texts=2)


def test_a_burst_of_parallel_texts_behind_a_running_batch_starts_after_its_window() -> None:
    """Two texts (the threshold) arriving together behind a running batch start beside it once
    their window has passed, with nothing else happening to wake the scheduler."""

    async def scenario(scheduler: Scheduler, recorder: Recorder) -> None:
        first = asyncio.create_task(scheduler.submit("a", ticket("a1"), recorder))
        await until(lambda: len(recorder.batches) == 1)
        burst = [asyncio.create_task(scheduler.submit("a", ticket(f"a{i}"), recorder)) for i in (2, 3)]
        done = await asyncio.wait_for(asyncio.gather(*burst), timeout=10)  # a TimeoutError: they waited
        assert done == ["a2", "a3"] and not first.done()
        recorder.release.set()
        assert await first == "a1"

    run(scenario, max_texts=8, parallel_texts=2)
