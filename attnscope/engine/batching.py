"""Admission, micro-batching and cancellation in front of the decode slots.

Requests whose decoding settings are equal (same model, beam, weights...) are kept in one
group. A free slot takes the group waiting longest as soon as it is worth it: when it is full
(``max_texts``), when its oldest request has waited ``window_s``, or at once when nothing else is
running (a lone client pays no window). Under load every slot is busy, so the requests that arrive
meanwhile gather into the next batch by themselves: the busier the server, the larger the batches.

While a batch of a group's settings is decoding, the group waits for it to end instead of
taking another slot after ``window_s``, until it holds ``parallel_texts`` texts (or fills up): a
few sentences cost almost as much to decode as a full batch (the shipped Transformer on one
core, greedy: 51 ms a sentence alone, 18 in a batch of 8, 10 in a batch of 32), and a small batch
beside a large one of the same model halves the large one's speed (they share the cores and the
interpreter). Measured with 32 clients, the window alone made batches of 6-7 on average (a large
one beside a stream of 1-4s); waiting made them ~14, but left the second core to the event loop
and serialisation, about a core in all for the whole server. A second batch of at least 12 beside
the first decodes both at once, one per core: 32 greedy clients went from 66-73 to 82-90
requests/s, beam 5 from 33-35 to 49-51 (``bench/load.py``). The default threshold is 16: with 32
greedy clients that made two batches of 16 instead of 12 (8 waiting), +2 to +16 % requests/s over
12 in three side-by-side runs (beam 5 within noise); 8 made smaller batches and was slower. Groups
of other settings (another model, beam...) still take free slots at once.

Each request is a :class:`Ticket`: it carries its own output budget (the decoders take one per
text, so a batch answers each request exactly as decoding it alone would), its deadline and a
flag its route sets when the client disconnects. A decode asks before every step whether anyone
still wants it and stops when no one does. The queue is bounded: past ``max_queue`` waiting
requests, :class:`~attnscope.serving.errors.Unavailable` (503 with ``Retry-After``).

Admission covers the batch as a whole: each ticket carries its :class:`~attnscope.engine.limits.Cost`
(weights kept, attention computed, answer bytes) and a batch takes tickets only while their sum
stays within ``batch_limit``, so 32 concurrent copies of a request at the limit decode one
after another instead of all at once (issue 35: 15 of 32 ran past the deadline, 4.4 GB). A
request the queue could not reach before its deadline (its work and the work ahead of it, at
the seconds per unit of work recent decodes took) gets 503 at once, with a ``Retry-After`` of
that estimate, instead of a 504 after waiting.

The rate is what the machine does now (issue 45.2: 30 of 64 requests admitted on a loaded
machine ran past their deadline, the rate being that of decodes finished before the load came):
a large decode still running past its own estimate shows the machine slower than the recent
rate says, before any decode has ended, and the rate is scaled by the worst such lag. A
request whose own estimate alone passes its deadline, nothing ahead of it, is refused up front
too (503 with ``Retry-After``), never admitted to time out."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from attnscope.decoding import DecodeStopped
from attnscope.engine import metrics
from attnscope.engine.errors import ClientGone, DeadlineExceeded, Unavailable
from attnscope.engine.limits import Cost

logger = logging.getLogger(__name__)

# Seconds per unit of work (attention weights computed) before any large decode has been timed:
# the worst batch computed ~3.5 G in more than 60 s on one core of the reference machine.
PRIOR_S_PER_WORK = 2e-8
RATE_MIN_WORK = 8_000_000  # smaller decodes are mostly fixed overhead: they do not set the rate

# run(key, tickets, should_stop) -> one result per ticket; runs in a decode slot's thread.
BatchRunner = Callable[[Hashable, list["Ticket"], Callable[[], bool]], list[Any]]


@dataclass(eq=False)
class Ticket:
    """One request waiting for (or in) a decode. ``texts`` are decoded with ``budgets`` output
    tokens each; ``future`` gets the runner's result for this ticket."""

    texts: list[str]
    budgets: list[int]
    deadline: float  # time.monotonic()
    timeout_s: float
    payload: Any = None  # what the runner needs besides the texts (a translation's attnscope.engine.request.Job)
    gone: threading.Event = field(default_factory=threading.Event)
    arrived: float = field(default_factory=time.monotonic)
    future: asyncio.Future[Any] | None = None
    runner: BatchRunner | None = None
    cost: Cost = field(default_factory=Cost)

    def abandoned(self, now: float | None = None) -> str | None:
        """Why nobody wants this answer any more ("client_gone", "deadline"), or None."""
        if self.gone.is_set():
            return "client_gone"
        if (time.monotonic() if now is None else now) > self.deadline:
            return "deadline"
        return None


class Scheduler:
    def __init__(
        self,
        executor: Executor,
        *,
        slots: int,
        max_queue: int,
        window_s: float,
        max_texts: int,
        parallel_texts: int | None = None,
        batch_limit: Cost | None = None,
    ) -> None:
        self.executor = executor
        self.slots, self.max_queue, self.window_s, self.max_texts = slots, max_queue, window_s, max_texts
        # A group with a batch decoding starts another beside it from this many texts on.
        self.parallel_texts = max_texts if parallel_texts is None else min(parallel_texts, max_texts)
        self._free = slots
        self._groups: dict[Hashable, list[Ticket]] = {}
        self._running: dict[Hashable, int] = {}  # batches decoding now, per group key
        self._queued = 0
        self._timer: asyncio.TimerHandle | None = None
        self.batch_limit = batch_limit or Cost(2**62, 2**62, 2**62)
        self._decode_s = 0.5  # running mean of one decode's duration, for Retry-After
        self._work_s = PRIOR_S_PER_WORK  # seconds per unit of work, from large decodes
        self._in_flight: dict[int, tuple[float, int]] = {}  # running batch -> (started, work)
        self._closed = threading.Event()

    def close(self) -> None:
        """Shutting down: new requests get 503 and running decodes stop at their next step."""
        self._closed.set()

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def running(self) -> int:
        return self.slots - self._free

    def calibrate(self, seconds: float, work: int) -> None:
        """Start from a decode of ``work`` timed now (``seconds``), in place of the prior (the
        caller times one of at least ``RATE_MIN_WORK``: smaller ones are mostly overhead)."""
        if work > 0 and seconds > 0:
            self._work_s = seconds / work

    def s_per_work(self, now: float | None = None) -> float:
        """Seconds per unit of work now: the recent decodes' rate, scaled up by how far the
        large decodes running now are past their estimate at that rate (a machine that became
        busy shows there first)."""
        now = time.monotonic() if now is None else now
        lags = [(now - started) / (work * self._work_s) for started, work in self._in_flight.values() if work >= RATE_MIN_WORK]
        return self._work_s * max([1.0, *lags])

    def estimate_s(self, ticket: Ticket, rate: float | None = None) -> float:
        """About how long ``ticket``'s share of a decode takes: its work at the rate now."""
        return ticket.cost.work * (self.s_per_work() if rate is None else rate)

    def wait_s(self) -> float:
        """About how long until the work queued and running now is done (all slots busy)."""
        now = time.monotonic()
        rate = self.s_per_work(now)
        queued = sum(self.estimate_s(t, rate) for group in self._groups.values() for t in group)
        running = sum(max(0.0, work * rate - (now - started)) for started, work in self._in_flight.values())
        batches = math.ceil(self._queued / self.max_texts)
        return (queued + running) / self.slots + self._decode_s * batches / self.slots

    def retry_after_s(self) -> int:
        """About when the queue ahead has drained: its work at the recent rate, and a decode's
        time per batch of waiting requests (issue 35: 1 s was sent while it took 32 s)."""
        return max(1, math.ceil(self.wait_s() + self._decode_s))

    async def submit(self, key: Hashable, ticket: Ticket, runner: BatchRunner) -> Any:
        """Queue ``ticket`` with the requests of ``key`` and wait for its result. Raises
        Unavailable (queue full), DeadlineExceeded or ClientGone."""
        if self._closed.is_set():
            raise Unavailable("the server is shutting down", retry_after_s=1)
        if self._queued - self._free >= self.max_queue:
            metrics.REJECTED.labels("queue_full").inc()
            raise Unavailable(
                f"the server is busy: {self.running} decodes running and {self._queued} requests "
                f"waiting (ATTNSCOPE_MAX_QUEUE={self.max_queue}); retry later",
                retry_after_s=self.retry_after_s(),
            )
        ahead, own = self.wait_s(), self.estimate_s(ticket)
        if ahead + own > ticket.timeout_s:
            metrics.REJECTED.labels("queue_time").inc()
            busy = f"the decodes queued and running need about {ahead:.0f} s, this one" if ahead >= 0.5 else "this decode"
            raise Unavailable(
                f"the server is busy: at the rate decodes run now, {busy} about {own:.1f} s more, past the "
                f"{ticket.timeout_s:g} s deadline (ATTNSCOPE_REQUEST_TIMEOUT_S); retry later or ask for less "
                "(a shorter max_length, a smaller beam_size)",
                retry_after_s=max(1, math.ceil(ahead + self._decode_s)),
            )
        loop = asyncio.get_running_loop()
        ticket.future = loop.create_future()
        ticket.future.add_done_callback(_retrieve)  # an answer nobody awaits any more is fine
        ticket.runner = runner
        self._groups.setdefault(key, []).append(ticket)
        self._queued += 1
        metrics.QUEUE_DEPTH.set(self._queued)
        self._kick()
        try:
            return await asyncio.wait_for(asyncio.shield(ticket.future), timeout=max(0.0, ticket.deadline - time.monotonic()))
        except TimeoutError:
            raise DeadlineExceeded(ticket.timeout_s) from None

    # -- dispatch (event loop) ------------------------------------------------------------

    def _kick(self) -> None:
        """Start every batch that is due while a slot is free; else wake up when one is."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = time.monotonic()
        while self._free > 0:
            self._drop_abandoned(now)
            due = self._due_group(now)
            if due is None:
                break
            self._start(due, self._take(due))
        # Groups behind a running batch of their own key wait for its end (_finished kicks),
        # unless they hold enough texts to go beside it once their window has passed.
        waiting = [
            group[0].arrived
            for key, group in self._groups.items()
            if not self._running.get(key) or sum(len(t.texts) for t in group) >= self.parallel_texts
        ]
        if self._free > 0 and waiting:
            wake = min(waiting) + self.window_s
            self._timer = asyncio.get_running_loop().call_later(max(0.0, wake - now), self._kick)

    def _due_group(self, now: float) -> Hashable | None:
        """The group waiting longest of those that should start now, if any."""
        idle = self._free == self.slots
        for key in sorted(self._groups, key=lambda k: self._groups[k][0].arrived):
            group = self._groups[key]
            texts = sum(len(t.texts) for t in group)
            if texts >= self.max_texts or not _total(group).within(self.batch_limit):
                return key  # full: nothing gains by waiting
            if self._running.get(key):
                # Behind a batch of its own settings: only a large enough batch goes beside it.
                if texts >= self.parallel_texts and now - group[0].arrived >= self.window_s:
                    return key
            elif idle or now - group[0].arrived >= self.window_s:
                return key
        return None

    def _take(self, key: Hashable) -> list[Ticket]:
        """Tickets of ``key`` in arrival order up to ``max_texts`` texts (at least one), and only
        while the batch's work at the rate now still ends before each member's deadline: a
        request was admitted on its own estimate, and the tickets that joined its group since
        would otherwise make its batch end after it (they wait for the next batch instead)."""
        group, texts, cost = self._groups[key], 0, Cost()
        batch: list[Ticket] = []
        now = time.monotonic()
        rate, due = self.s_per_work(now), math.inf  # due: the earliest deadline in the batch
        while group and (
            not batch
            or (
                texts + len(group[0].texts) <= self.max_texts
                and (cost + group[0].cost).within(self.batch_limit)
                and now + (cost + group[0].cost).work * rate <= min(due, group[0].deadline)
            )
        ):
            ticket = group.pop(0)
            batch.append(ticket)
            texts += len(ticket.texts)
            cost += ticket.cost
            due = min(due, ticket.deadline)
        if not group:
            del self._groups[key]
        self._queued -= len(batch)
        metrics.QUEUE_DEPTH.set(self._queued)
        return batch

    def _drop_abandoned(self, now: float) -> None:
        """Requests whose client left (or deadline passed) while queued never start."""
        for key in list(self._groups):
            keep = []
            for ticket in self._groups[key]:
                reason = ticket.abandoned(now)
                if reason is None:
                    keep.append(ticket)
                    continue
                self._queued -= 1
                metrics.CANCELLED.labels(reason).inc()
                _settle(ticket, exc=_stopped(ticket, reason))
            if keep:
                self._groups[key] = keep
            else:
                del self._groups[key]
        metrics.QUEUE_DEPTH.set(self._queued)

    def _start(self, key: Hashable, batch: list[Ticket]) -> None:
        self._free -= 1
        self._running[key] = self._running.get(key, 0) + 1
        metrics.RUNNING.set(self.running)
        runner = batch[0].runner
        assert runner is not None
        loop = asyncio.get_running_loop()
        work = _total(batch).work
        job = loop.run_in_executor(self.executor, _run_batch, loop, key, batch, runner, self._closed)
        self._in_flight[id(job)] = (time.monotonic(), work)
        job.add_done_callback(lambda f: self._finished(key, f, work))

    def _finished(self, key: Hashable, job: asyncio.Future[tuple[float, str]], work: int = 0) -> None:
        self._in_flight.pop(id(job), None)
        seconds, outcome = job.result() if not job.cancelled() and job.exception() is None else (0.0, "failed")
        self.learn(seconds, work, outcome)
        self._free += 1
        self._running[key] -= 1
        if not self._running[key]:
            del self._running[key]
        metrics.RUNNING.set(self.running)
        self._kick()

    def learn(self, seconds: float, work: int, outcome: str) -> None:
        """The rate after a batch of ``work`` ended after ``seconds`` with ``outcome``: "done"
        (it ran all its work: large decodes set the rate, overhead aside; every one the mean
        decode time), "stopped" (deadline, client gone or shutdown: it ran *part* of its work in
        that time, so the rate is at least that slow and the mean decode time at least that
        long, never less) or "failed" (an error: it says nothing of either).
        Before, a stopped or failed batch counted as done: a job refused by its own check at
        once (or cut off at its deadline) made the machine look faster than it is, and the
        requests admitted on that rate ran late (issue 45.2)."""
        if outcome == "done":
            if work >= RATE_MIN_WORK:
                self._work_s = 0.7 * self._work_s + 0.3 * seconds / work
            self._decode_s = 0.8 * self._decode_s + 0.2 * seconds
        elif outcome == "stopped":  # what it took is a lower bound: both may only grow
            if work >= RATE_MIN_WORK:
                self._work_s = max(self._work_s, seconds / work)
            self._decode_s = max(self._decode_s, 0.8 * self._decode_s + 0.2 * seconds)


# -- a batch, in a decode slot's thread ------------------------------------------------------


def _run_batch(
    loop: asyncio.AbstractEventLoop,
    key: Hashable,
    batch: list[Ticket],
    runner: BatchRunner,
    closed: threading.Event,
) -> tuple[float, str]:
    """Decode ``batch`` as one; hand each ticket its result. Returns the seconds it took and how
    it ended ("done", "stopped", "failed": :meth:`Scheduler.learn`). The decode stops when every
    ticket is abandoned, or the server shuts down."""
    started = time.monotonic()
    metrics.BATCH_TEXTS.observe(sum(len(t.texts) for t in batch))
    metrics.BATCH_REQUESTS.observe(len(batch))

    def should_stop() -> bool:
        now = time.monotonic()
        return closed.is_set() or all(t.abandoned(now) is not None for t in batch)

    try:
        results = runner(key, batch, should_stop)
    except DecodeStopped:
        for ticket in batch:
            reason = ticket.abandoned() or "shutdown"
            metrics.CANCELLED.labels(reason).inc()
            loop.call_soon_threadsafe(_settle, ticket, None, _stopped(ticket, reason))
        logger.info("decode of %d request(s) stopped: nobody waits for it any more", len(batch))
        return time.monotonic() - started, "stopped"
    except Exception as err:  # noqa: BLE001 - every waiting request gets the error (a 500, logged)
        for ticket in batch:
            loop.call_soon_threadsafe(_settle, ticket, None, err)
        return time.monotonic() - started, "failed"
    for ticket, result in zip(batch, results, strict=True):
        loop.call_soon_threadsafe(_settle, ticket, result, None)
    return time.monotonic() - started, "done"


def _total(tickets: list[Ticket]) -> Cost:
    total = Cost()
    for ticket in tickets:
        total += ticket.cost
    return total


def _stopped(ticket: Ticket, reason: str) -> Exception:
    if reason == "client_gone":
        return ClientGone()
    if reason == "shutdown":
        return Unavailable("the server is shutting down", retry_after_s=1)
    return DeadlineExceeded(ticket.timeout_s)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _settle(ticket: Ticket, result: Any = None, exc: BaseException | None = None) -> None:
    future = ticket.future
    if future is None or future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
