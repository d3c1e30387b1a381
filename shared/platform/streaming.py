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

import contextlib
import functools
import itertools
import json
import logging
import re
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from types import FrameType

from py4j.protocol import Py4JJavaError
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamReader

from shared.platform.kafka_admin import offset_bounds
from shared.platform.kafka_security import spark_kafka_options
from shared.platform.logs import log_event
from shared.settings import KafkaSettings

logger = logging.getLogger("lambdaline.streaming")

MicroBatchFunction = Callable[[DataFrame, int], None]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_S = 1
"""How often a waiting main thread looks at the stop flag."""

QUERY_STOP_TIMEOUT_S = 30
"""``spark.sql.streaming.stopTimeout`` (``shared.platform.spark_session`` sets it): a query's
stop() waits for its stream thread, which closes the source's Kafka admin client,
which waits for its calls to the broker. With the broker gone first, a speed job
given SIGTERM was still running 4.5 minutes later (docs/architecture.md)."""

BRIEF_ERROR_CHARS = 1000
"""At most this much of a Java error's message travels back to Spark (see below)."""


def kafka_stream(
    spark: SparkSession, kafka: KafkaSettings, topics: Sequence[str]
) -> DataStreamReader:
    """Spark's Kafka source on ``topics``, from their earliest offsets; both layers read with it.

    Its clients wait ``kafka_timeout`` for the cluster, as lambdaline's own do
    (Kafka's ``default.api.timeout.ms``, 60 s unless set). A query whose broker
    has gone fails once they give up, and Spark looks up offsets three times
    before it does: with the default, a speed job noticed a stopped broker only
    after three minutes.
    """
    timeout_ms = str(int(kafka.timeout.total_seconds() * 1000))
    return (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(kafka))
        # Kafka refuses an API timeout shorter than a request's (30 s unless set)
        .option("kafka.default.api.timeout.ms", timeout_ms)
        .option("kafka.request.timeout.ms", timeout_ms)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
    )


def from_times(
    reader: DataStreamReader, kafka: KafkaSettings, starts: Mapping[str, datetime]
) -> DataStreamReader:
    """``reader`` (:func:`kafka_stream`) starting each topic of ``starts`` at the first record
    of that time or later, by record timestamp (Kafka's ``offsetsForTimes``), and at its
    end if it holds none; a topic not named starts at its earliest. Only a new
    checkpoint reads from there: a checkpoint's own offsets win."""
    partitions: dict[str, list[int]] = {}
    for topic, partition in offset_bounds(kafka, list(starts)):
        partitions.setdefault(topic, []).append(partition)
    by_time = {
        topic: {str(p): int(starts[topic].timestamp() * 1000) for p in sorted(numbers)}
        for topic, numbers in partitions.items()
    }
    return reader.option("startingOffsetsByTimestamp", json.dumps(by_time)).option(
        "startingOffsetsByTimestampStrategy", "latest"
    )


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


@contextlib.contextmanager
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


def wait_for(queries: Sequence[StreamingQuery], request: StopRequest) -> bool:
    """Wait until every query has ended or one has failed (True), or a stop is requested (False).

    One failed query ends the wait at once, whichever it is, so that a failure
    never goes unnoticed while another query runs on: the caller stops the others
    and raises :func:`raise_if_failed`'s error, one line instead of a Python
    traceback and the query's whole logical plan.
    """
    while True:
        active = [query for query in queries if query.isActive]
        if not active or any(query.exception() is not None for query in queries):
            return True
        if request.is_set():
            return False
        with contextlib.suppress(StreamingQueryException):  # it failed: seen next round
            active[0].awaitTermination(POLL_S)


class QueryFailedError(RuntimeError):
    """A streaming query ended with an error: the message names it and the error's cause."""


class KafkaDataLossError(QueryFailedError):
    """A query's Kafka source holds fewer records than its checkpoint has read.

    Spark's ``failOnDataLoss`` (on in both layers): the topics were deleted and
    created again, the broker's data was lost, or retention deleted records
    before the query read them. Going on from the checkpoint fails the same way.
    """


_DATA_LOST = "Some data may have been lost"
_DATA_LOSS_REASON = re.compile(r"Reason: ([^\n]+)")


_ERROR_NAME = re.compile(r"\b\w+(?:Exception|Error): ")
_TRACE_STARTS = (
    "\n\tat ",
    "\nDriver stacktrace:",
    "\n=== Streaming Query ===",
    "\nJVM stacktrace:",
)
CAUSE_CHARS = 400


def innermost_cause(text: str) -> str:
    """The last ``SomeException: message`` (or ``...Error``) of an error's text, to its line's end.

    A foreachBatch failure nests its errors in text: the Python proxy's error
    holds the Python traceback, ending in foreachBatch's error, which holds the
    Java error of the job it ran, whose message holds the failed task's error
    (``... most recent failure: Lost task 1.0 ...: org.apache.kafka.common.errors.
    TimeoutException: Timeout of 60000ms expired ...``). Stack traces and the
    query's plan are left out.
    """
    text = _before_trace(text)
    names = list(_ERROR_NAME.finditer(text))
    cause = text[names[-1].start() :] if names else text.strip()
    return cause.split("\n", 1)[0].strip()[:CAUSE_CHARS]


def _before_trace(text: str) -> str:
    """An error's text up to its first stack trace or query plan."""
    for start in _TRACE_STARTS:
        text = text.split(start, 1)[0]
    return text


def failure_cause(error: Exception) -> str:
    """A failed query's cause in one line: the innermost error it wraps.

    The message of Spark's error names only the outermost failure (``Failed to
    create new KafkaAdminClient``); the reason is in its Java causes
    (``ConfigException: ...``), which pyspark keeps as a chain of Python errors
    (``_cause``, in the pinned pyspark; without it, the text is read). A
    foreachBatch failure's innermost cause is the Python proxy's error, whose
    text holds the Python traceback and, in it, the Java error.
    """
    return innermost_cause(str(_innermost(error)))


def _innermost(error: Exception) -> Exception:
    while (cause := getattr(error, "_cause", None)) is not None:
        error = cause
    return error


def raise_if_failed(queries: Sequence[StreamingQuery]) -> None:
    """Raise :class:`QueryFailedError` for the first of ``queries`` that ended with an error."""
    for query in queries:
        error = query.exception()
        if error is None:
            continue
        cause = failure_cause(error)
        if _DATA_LOST in cause:  # its first line says only that; the reason is on a later one
            reasons = _DATA_LOSS_REASON.findall(_before_trace(str(_innermost(error))))
            raise KafkaDataLossError(
                f"query {query.name} failed: Kafka no longer holds records its checkpoint "
                f"has read or expects ({reasons[-1].strip() if reasons else cause})"
            )
        raise QueryFailedError(f"query {query.name} failed: {cause}")


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
    running. Spark (4.0 to 4.2) tells that from a real failure by matching the Python
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
