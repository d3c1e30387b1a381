"""Running Structured Streaming queries from Python: both layers' stop handling.

A signal must not interrupt a py4j call. The main thread spends a streaming run
inside one (``awaitTermination``), and an exception raised there by a signal
handler (SystemExit, KeyboardInterrupt) leaves that call's connection with an
answer nobody reads: the next call on it reads that answer instead of its own.
A batch run stopped by SIGTERM during its ingest exited 1 with two tracebacks
(``SparkSession does not exist in the JVM``) instead of 143. So while a query
runs, :func:`stop_requests` turns SIGINT, SIGTERM and SIGHUP into a flag, the
caller polls ``awaitTermination`` and stops its queries between calls
(:func:`stop_query`), and only then exits.
"""

from __future__ import annotations

import functools
import itertools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from shared.logs import log_event

logger = logging.getLogger("lambdaline.streaming")

MicroBatchFunction = Callable[[DataFrame, int], None]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_S = 1
"""How often a waiting main thread looks at the stop flag."""

QUERY_STOP_TIMEOUT_S = 30
"""``spark.sql.streaming.stopTimeout`` (``shared.spark_session`` sets it): a query's
stop() waits for its stream thread, which closes the source's Kafka admin client,
which waits for its calls to the broker. With the broker gone first, a speed job
given SIGTERM was still running 4.5 minutes later (docs/architecture.md)."""

BRIEF_ERROR_CHARS = 1000
"""At most this much of a Java error's message travels back to Spark (see below)."""


class StopRequest:
    """Set by the first of :data:`STOP_SIGNALS` while :func:`stop_requests` is active."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def is_set(self) -> bool:
        return self.event.is_set()

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process ended by the signal (130 for SIGINT)."""
        return 128 + (self.signum or signal.SIGTERM)


@contextmanager
def stop_requests(on_signal: Callable[[int], None] | None = None) -> Iterator[StopRequest]:
    """While active, a stop signal only sets the request (and calls ``on_signal``);
    the handlers before are restored on exit."""
    request = StopRequest()

    def handle(signum: int, frame: FrameType | None) -> None:
        if request.signum is None:
            request.signum = signum
        request.event.set()
        if on_signal is not None:
            on_signal(signum)

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def wait_for(query: StreamingQuery, request: StopRequest) -> bool:
    """Wait until the query terminates (True) or a stop is requested (False)."""
    while not query.awaitTermination(POLL_S):
        if request.is_set():
            return False
    return True


def stop_query(query: StreamingQuery) -> None:
    """Stop a query, or log that it did not stop within :data:`QUERY_STOP_TIMEOUT_S`.

    Its stream thread is a daemon: the driver still exits, and the checkpoint
    holds no commit for the micro-batch it left, so the next start runs it again.
    """
    try:
        query.stop()
    except Py4JJavaError as error:  # java.util.concurrent.TimeoutException
        message = " ".join(without_stack_trace(error).split())
        log_event(logger, "query_stop_timeout", query=query.name, error=message)


class MicroBatchError(RuntimeError):
    """A foreachBatch function's Java error without its Java stack trace."""


def without_stack_trace(error: Exception) -> str:
    """A py4j error's text up to its Java stack trace: the call, the Java class and message."""
    lines = itertools.takewhile(lambda line: not line.startswith("\tat "), str(error).splitlines())
    return "\n".join(lines)[:BRIEF_ERROR_CHARS]


def brief_java_errors(function: MicroBatchFunction) -> MicroBatchFunction:
    """Wrap a foreachBatch function so that a Java error leaves it without its stack trace.

    Stopping a query interrupts or cancels what its foreachBatch function is
    running. Spark 4.0 tells that from a real failure by matching the Python
    error's text against ``Py4JJavaError: An error occurred while calling(.|\\n)*
    InterruptedException`` (or a cancelled job of the query's group), with a
    regular expression that recurses once per character: on a Py4JJavaError,
    whose text holds the whole Java stack trace, every SIGTERM killed the
    stream threads with a StackOverflowError. Re-raised as the error's class
    and message only (``... Py4JJavaError: An error occurred while calling
    o71.save.\\n: java.lang.InterruptedException``), the stop is recognised and
    the query ends cleanly; a real failure keeps its Java class and message, and
    the full text goes to the debug log.
    """

    @functools.wraps(function)
    def call(rows: DataFrame, batch_id: int) -> None:
        try:
            function(rows, batch_id)
        except Py4JJavaError as error:
            logger.debug("micro-batch %d failed: %s", batch_id, error)
            message = without_stack_trace(error)
            kind = f"{type(error).__module__}.{type(error).__qualname__}"
            raise MicroBatchError(f"micro-batch {batch_id} failed: {kind}: {message}") from None

    return call
