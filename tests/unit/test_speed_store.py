"""foreachBatch errors leave the speed layer as one short message (no Java stack)."""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from shared.platform.streaming import (
    BRIEF_ERROR_CHARS,
    MicroBatchError,
    MicroBatchFunction,
    brief_java_errors,
)

NO_ROWS: Any = None  # the functions here never look at their rows

JAVA_TEXT = (
    "An error occurred while calling o71.save.\n"
    ": java.lang.InterruptedException\n"
    + "\tat org.apache.spark.scheduler.DAGScheduler.runJob(DAGScheduler.scala:1)\n"
    * 200
)


class JavaError(Py4JJavaError):
    """A Py4JJavaError without a JVM behind it: its text is given."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def failing(text: str) -> MicroBatchFunction:
    def publish(rows: Any, batch_id: int) -> None:
        raise JavaError(text)

    return publish


def test_a_java_error_keeps_its_class_and_message_without_the_stack() -> None:
    with pytest.raises(MicroBatchError) as raised:
        brief_java_errors(failing(JAVA_TEXT))(NO_ROWS, 7)
    message = str(raised.value)
    assert message == (
        f"micro-batch 7 failed: {__name__}.JavaError: An error occurred while calling "
        "o71.save.\n: java.lang.InterruptedException"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_long_message_is_cut() -> None:
    text = "An error occurred while calling o9.save.\n: " + "x" * 5000
    with pytest.raises(MicroBatchError) as raised:
        brief_java_errors(failing(text))(NO_ROWS, 1)
    assert len(str(raised.value)) < BRIEF_ERROR_CHARS + 100
    assert str(raised.value).endswith("x")


def test_other_errors_pass_unchanged() -> None:
    def publish(rows: Any, batch_id: int) -> None:
        raise ValueError("not a Java error")

    with pytest.raises(ValueError, match="not a Java error"):
        brief_java_errors(publish)(NO_ROWS, 1)
