"""``lambdaline speed ...``: the speed layer's commands."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Annotated

import typer
from rich.console import Console

from shared.kafka_admin import KafkaNotReadyError, kafka_answers, require_kafka
from shared.logs import configure_logging
from shared.settings import get_settings
from shared.streaming import QueryFailedError
from shared.topics import all_topics
from speed_layer import job
from speed_layer.checkpoint import CheckpointError, held_checkpoint

speed_app = typer.Typer(help="The speed layer: Structured Streaming from Kafka to the speed store.")


@speed_app.command("run")
def speed_run(
    available_now: Annotated[
        bool, typer.Option("--available-now", help="process what Kafka holds now, then exit 0")
    ] = False,
) -> None:
    """Run the speed job (continuous by default; Ctrl-C or SIGTERM stops it cleanly)."""
    configure_logging()
    settings = get_settings()
    with ExitStack() as held:
        try:
            held.enter_context(held_checkpoint(settings))
            require_kafka(settings, [spec.name for spec in all_topics(settings)])
        except (CheckpointError, KafkaNotReadyError) as error:
            raise _fail(str(error)) from None
        spark = job.speed_spark_session(settings)
        failure: QueryFailedError | None = None
        try:
            job.run(spark, settings, available_now=available_now)
        except QueryFailedError as error:
            failure = error
        finally:
            # stops the SparkContext, which deletes its scratch (shuffle files, the
            # driver's temporary files) before the JVM exits with this process
            spark.stop()
    if failure is not None:
        raise _fail(
            f"{failure}{kafka_answers(settings)}; the checkpoint holds every committed "
            "micro-batch: run `lambdaline speed run` again to go on from there"
        )


def _fail(message: str) -> typer.Exit:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(1)
