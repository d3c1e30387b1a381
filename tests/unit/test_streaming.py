"""Stopping streaming queries from Python: a signal sets a request, the waiting thread acts on it."""

from __future__ import annotations

import os
import signal
import threading
import time

from shared.streaming import stop_requests, wait_for


class BlockingQuery:
    """Stands in for a StreamingQuery: awaitTermination blocks, as its py4j call does."""

    def __init__(self, terminates_after_s: float | None = None):
        self.deadline = (
            None if terminates_after_s is None else time.monotonic() + terminates_after_s
        )

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802 (pyspark's name)
        time.sleep(timeout)
        return self.deadline is not None and time.monotonic() >= self.deadline


def test_a_stop_signal_ends_the_wait_between_calls_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[int] = []
    with stop_requests(on_signal=seen.append) as stop:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        began = time.monotonic()
        assert wait_for(BlockingQuery(), stop) is False  # returned, did not raise mid-call
        assert time.monotonic() - began < 5
        os.kill(os.getpid(), signal.SIGHUP)  # a second signal: the first one's code stays
        time.sleep(0.1)
    assert seen == [signal.SIGTERM, signal.SIGHUP]
    assert stop.exit_code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_query_that_terminates_is_waited_for_to_its_end() -> None:
    with stop_requests() as stop:
        assert wait_for(BlockingQuery(terminates_after_s=1.5), stop) is True
    assert not stop.is_set()
