"""``lambdaline speed ...``: the speed layer's commands."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import Annotated

import typer
from rich.console import Console

from shared.platform.generations import (
    GENERATION_HELP,
    Generation,
    GenerationError,
    generation_settings,
    read_generations,
)
from shared.platform.jvm import JavaCompileError, JdkToolMissingError
from shared.platform.kafka_admin import KafkaNotReadyError, kafka_answers
from shared.platform.logs import configure_logging
from shared.platform.streaming import KafkaDataLossError, QueryFailedError
from shared.platform.topic_admin import TopicDeletionError
from shared.platform.topic_ids import TopicsRecreatedError
from shared.settings import Settings, get_settings
from speed_layer import job
from speed_layer.checkpoint import (
    CheckpointError,
    checkpoint_dir,
    claimed_checkpoint,
    reset,
)

START_OVER = "`lambdaline speed reset` starts the speed layer over from what the topics hold now"

speed_app = typer.Typer(help="The speed layer: Structured Streaming from Kafka to the speed store.")


GenerationOption = Annotated[int | None, typer.Option("--generation", min=1, help=GENERATION_HELP)]


def _generation_settings(number: int | None) -> tuple[Settings, Generation | None]:
    """The settings of the generation asked for, and its record (None: generation 1, never
    recorded)."""
    settings = get_settings()
    try:
        chosen = generation_settings(settings, number)
        recorded = read_generations(settings.batch_store_root).get(chosen.generation)
    except GenerationError as error:
        raise _fail(str(error)) from None
    return chosen, recorded


@speed_app.command("run")
def speed_run(
    available_now: Annotated[
        bool, typer.Option("--available-now", help="process what Kafka holds now, then exit 0")
    ] = False,
    generation: GenerationOption = None,
) -> None:
    """Run the speed job (continuous by default; Ctrl-C or SIGTERM stops it cleanly)."""
    configure_logging()
    settings, recorded = _generation_settings(generation)
    with ExitStack() as held:
        try:
            held.enter_context(claimed_checkpoint(settings))
        except (CheckpointError, KafkaNotReadyError) as error:
            raise _fail(str(error)) from None
        except TopicsRecreatedError as error:
            raise _fail(f"{error}. {START_OVER}") from None
        try:
            spark = job.speed_spark_session(settings)
        except (JavaCompileError, JdkToolMissingError) as error:
            raise _fail(str(error)) from None
        failure: QueryFailedError | None = None
        refusal: CheckpointError | None = None
        try:
            job.run(
                spark,
                settings,
                available_now=available_now,
                replay_from=recorded.replay_from if recorded is not None else None,
            )
        except QueryFailedError as error:
            failure = error
        except CheckpointError as error:
            refusal = error
        finally:
            # stops the SparkContext, which deletes its scratch (shuffle files, the
            # driver's temporary files) before the JVM exits with this process
            spark.stop()
    if refusal is not None:
        raise _fail(str(refusal))
    if isinstance(failure, KafkaDataLossError):
        raise _fail(
            f"{failure}: the input topics were deleted and created again, the broker's data "
            "was lost, or retention deleted records before the job read them. Going on from "
            f"this checkpoint fails the same way; {START_OVER}"
        )
    if failure is not None:
        raise _fail(
            f"{failure}{kafka_answers(settings.kafka)}; the checkpoint holds every committed "
            "micro-batch: run `lambdaline speed run` again to go on from there"
        )


@speed_app.command("reset")
def speed_reset(
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    generation: GenerationOption = None,
) -> None:
    """Start the speed layer over: delete its checkpoint and speed-store topics, then
    create the topics again, empty (to change a view without a second generation, and
    with a gap: `lambdaline generation start` changes one without)."""
    configure_logging()
    settings, _ = _generation_settings(generation)
    topics = settings.speed_topics.speed_store()
    console = Console(soft_wrap=True)
    console.print(
        f"This deletes the speed checkpoint {checkpoint_dir(settings)} and the topics "
        f"{', '.join(topics)} on {settings.kafka.bootstrap}, then creates the topics again, "
        "empty. The input topics and dead.letters are kept.",
        highlight=False,
    )
    if not yes:
        if not sys.stdin.isatty():
            raise _fail("nothing deleted: confirm with --yes where there is no terminal to ask")
        if not typer.confirm("Start the speed layer over?"):
            raise _fail("nothing deleted")
    try:
        done = reset(settings)
    except (CheckpointError, KafkaNotReadyError, TopicDeletionError) as error:
        raise _fail(str(error)) from None
    gone = f"the checkpoint {done.checkpoint}" if done.checkpoint else "no checkpoint (none was)"
    console.print(
        f"Deleted {gone} and {len(done.topics)} topics; the speed-store topics are empty. "
        "`lambdaline speed run` now computes every view from the input topics' earliest "
        "records. Running API processes notice the new topics and read them from the start; "
        "if the view sizes changed, restart them with the new settings too.",
        highlight=False,
    )


def _fail(message: str) -> typer.Exit:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(1)
