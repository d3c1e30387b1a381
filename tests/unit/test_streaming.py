"""Waiting for streaming queries from Python: stop signals between calls, failures in one line."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from shared.platform.streaming import (
    KafkaDataLossError,
    QueryFailedError,
    innermost_cause,
    raise_if_failed,
    stop_requests,
    wait_for,
)


class BlockingQuery:
    """Stands in for a StreamingQuery: awaitTermination blocks, as its py4j call does."""

    def __init__(
        self, terminates_after_s: float | None = None, error: str | None = None, name: str = "q"
    ):
        self.deadline = (
            None if terminates_after_s is None else time.monotonic() + terminates_after_s
        )
        self.error = error
        self.name = name

    @property
    def isActive(self) -> bool:  # noqa: N802 (pyspark's name)
        return self.deadline is None or time.monotonic() < self.deadline

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802 (pyspark's name)
        time.sleep(timeout)
        return not self.isActive

    def exception(self) -> Exception | None:
        return RuntimeError(self.error) if self.error and not self.isActive else None


def test_a_stop_signal_ends_the_wait_between_calls_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[int] = []
    with stop_requests(on_signal=seen.append) as stop:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        began = time.monotonic()
        assert wait_for([BlockingQuery()], stop) is False  # returned, did not raise mid-call
        assert time.monotonic() - began < 5
        os.kill(os.getpid(), signal.SIGHUP)  # a second signal: the first one's code stays
        time.sleep(0.1)
    assert seen == [signal.SIGTERM, signal.SIGHUP]
    assert stop.exit_code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_queries_that_terminate_are_waited_for_to_the_last_one() -> None:
    with stop_requests() as stop:
        began = time.monotonic()
        assert wait_for([BlockingQuery(0.5), BlockingQuery(2.5)], stop) is True
        assert time.monotonic() - began >= 2.5
    assert not stop.is_set()


def test_one_failed_query_ends_the_wait_while_the_others_run() -> None:
    running = BlockingQuery(name="speed.booth_stats")
    failed = BlockingQuery(1.0, error="boom", name="speed.lookups")
    with stop_requests() as stop:
        began = time.monotonic()
        assert wait_for([running, failed], stop) is True
        assert time.monotonic() - began < 5  # the first query never ends by itself
    with pytest.raises(QueryFailedError, match=r"^query speed\.lookups failed: boom$"):
        raise_if_failed([running, failed])


# the text of a real failure (speed.booth_stats after its broker stopped), Java stack cut short
BROKER_GONE = """\
[STREAM_FAILED] Query [id = 6c20c351, runId = bd61ac26] terminated with exception: \
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach \
batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most \
recent call last):
  File "/work/main/shared/platform/streaming.py", line 141, in call
    raise MicroBatchError(f"micro-batch {batch_id} failed: {kind}: {message}") from None
shared.platform.streaming.MicroBatchError: micro-batch 17 failed: py4j.protocol.Py4JJavaError: An error \
occurred while calling o6059.save.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 82.0 failed \
1 times, most recent failure: Lost task 1.0 in stage 82.0 (TID 177) (192.0.2.2 executor driver): \
org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before the position \
for partition toll.entries-0 could be determined

Driver stacktrace:

	at py4j.Protocol.getReturnValue(Protocol.java:476)
 SQLSTATE: 39000 SQLSTATE: XXKST
=== Streaming Query ===
Identifier: speed.booth_stats [id = 6c20c351, runId = bd61ac26]
Logical Plan:
~WriteToMicroBatchDataSourceV1 ForeachBatchSink
   +- ~Generate inline(array(struct(_reason, CASE WHEN NOT _is_object#21 THEN invalid_json
"""


def test_the_innermost_cause_is_the_last_named_error_before_the_stack_and_plan() -> None:
    assert innermost_cause(BROKER_GONE) == (
        "TimeoutException: Timeout of 60000ms expired before the position for partition "
        "toll.entries-0 could be determined"
    )
    assert innermost_cause("no error name here\nsecond line") == "no error name here"


# the innermost error of a real failure (speed.booth_stats after the broker's data was wiped
# and the topics created again), Java stack cut short
DATA_LOST = """\
KafkaIllegalStateException: Some data may have been lost because they are not available in \
Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option \
failOnDataLoss to false.
Reason: Partition toll.entries-0 offset was changed from 1023 to 255.
	at org.apache.spark.sql.kafka010.KafkaExceptions$.partitionOffsetChanged(KafkaExceptions.scala:151)
"""


def test_lost_kafka_data_is_its_own_error_with_the_reason_spark_gives() -> None:
    failed = BlockingQuery(0.0, error=DATA_LOST, name="speed.booth_stats")
    with pytest.raises(KafkaDataLossError) as raised:
        raise_if_failed([failed])
    assert str(raised.value) == (
        "query speed.booth_stats failed: Kafka no longer holds records its checkpoint has read "
        "or expects (Partition toll.entries-0 offset was changed from 1023 to 255.)"
    )
