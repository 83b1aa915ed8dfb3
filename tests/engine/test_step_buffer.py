"""The bounded buffer between a stream's decode and its writer (attnscope.engine.stream_flow,
issue 45.1): the decode waits for the writer; a reader that never reads is dropped at its send
timeout; a closed writer drops events at once. Asserted on bytes and events, never on timings.
Through a server: tests/serving/test_stream_flow.py."""

from __future__ import annotations

import asyncio
import threading

from attnscope.engine.stream_flow import StepBuffer
from attnscope.testing import in_own_thread, until


def test_the_buffer_holds_at_most_its_bytes_and_the_producer_waits() -> None:

    def body() -> None:
        loop = asyncio.new_event_loop()
        gone = threading.Event()
        buffer = StepBuffer(loop, max_bytes=3000, send_timeout_s=600, gone=gone)
        put = []

        def produce() -> None:
            for i in range(10):
                buffer.put(bytes([i]) * 1000)
                put.append(i)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        until(lambda: buffer.waits == 1, "the producer never waited")
        assert put == [0, 1, 2] and buffer.queued_bytes == 3000  # full: the decode waits
        assert loop.run_until_complete(buffer.get()) == b"\0" * 1000  # the writer sends one ...
        until(lambda: len(put) == 4 and buffer.waits == 2, "one more event once there was room")
        assert buffer.queued_bytes == 3000 and buffer.peak_bytes == 3000
        got = [loop.run_until_complete(buffer.get()) for _ in range(9)]
        producer.join(60)
        assert [g[0] for g in got] == list(range(1, 10)) and buffer.peak_bytes == 3000 and not gone.is_set()
        loop.close()

    in_own_thread(body)  # a loop of its own: the browser tests' Playwright keeps one running here


def test_a_reader_that_never_reads_is_dropped_and_the_decode_told() -> None:
    loop = asyncio.new_event_loop()
    gone = threading.Event()
    buffer = StepBuffer(loop, max_bytes=2000, send_timeout_s=0.05, gone=gone)
    for _ in range(50):  # a decode of 50 steps, nobody reading
        buffer.put(b"x" * 1000)
    assert gone.is_set()  # the decode stops at its next step
    assert buffer.queued_bytes == 2000 and buffer.peak_bytes == 2000  # never more than its bound
    loop.close()


def test_a_closed_writer_drops_events_at_once() -> None:
    loop = asyncio.new_event_loop()
    gone = threading.Event()
    buffer = StepBuffer(loop, max_bytes=1000, send_timeout_s=600, gone=gone)
    buffer.put(b"a" * 1000)
    waiting = threading.Thread(target=buffer.put, args=(b"b" * 1000,), daemon=True)
    waiting.start()
    until(lambda: buffer.waits == 1, "never waited")
    buffer.close()  # the response was closed (the client left)
    waiting.join(60)
    assert not waiting.is_alive() and gone.is_set() and buffer.queued_bytes == 1000
    loop.close()
