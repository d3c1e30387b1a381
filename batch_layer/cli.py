"""``lambdaline batch ...``: the batch layer's commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pyspark.sql import SparkSession
from rich import box
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from batch_layer import ingest_reset
from batch_layer.master import MasterDataset, MasterDatasetError
from batch_layer.publish import rollback, run_lock
from batch_layer.run import (
    RunReport,
    batch_spark_session,
    default_run_date,
    horizon_after,
    run_batch,
)
from batch_layer.schedule import Scheduler, next_run_after, serve_until_signalled
from shared.domain.events import format_instant
from shared.platform.batch_store import (
    STORE_TABLES,
    BatchStoreError,
    ListedVersion,
    list_versions,
)
from shared.platform.generations import (
    GENERATION_HELP,
    GenerationError,
    chosen_settings,
    generation_settings,
)
from shared.platform.kafka_admin import KafkaNotReadyError, kafka_answers, require_kafka
from shared.platform.logs import configure_logging
from shared.platform.streaming import KafkaDataLossError, QueryFailedError
from shared.platform.topic_ids import TopicsRecreatedError
from shared.settings import Settings, get_settings
from shared.settings.cron import check_cron

batch_app = typer.Typer(
    help="The batch layer: master dataset, nightly recompute, versioned DuckDB publish."
)
console = Console(soft_wrap=True)  # long lines stay whole (lambdaline.cli says why)
errors = Console(stderr=True, soft_wrap=True)


def _fail(message: str) -> typer.Exit:
    errors.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(1)


def _generation(number: int | None) -> Settings:
    try:
        return generation_settings(get_settings(), number)
    except GenerationError as error:
        raise _fail(str(error)) from None


def _spark_over_kafka(settings: Settings) -> SparkSession:
    """The batch's Spark session, once the cluster answers and holds the input topics
    (checked first: Spark's Kafka source would retry for minutes without saying why)."""
    try:
        require_kafka(settings.kafka, settings.topics.inputs())
    except KafkaNotReadyError as error:
        raise _fail(str(error)) from None
    return batch_spark_session(settings)


def _run_date(value: str | None) -> date:
    if value is None:
        return default_run_date()
    try:
        return date.fromisoformat(value)
    except ValueError:
        # parsed in the command's body, so the option is named here (click cannot know it)
        raise typer.BadParameter(
            f"{value!r} is not a date (YYYY-MM-DD)", param_hint="'--date'"
        ) from None


def require_closed(day: date, now: datetime) -> None:
    """Refuse a day that has not ended: its view would be partial, its horizon in the future.

    The horizon never moves back but by rollback, so a mistyped year would hide
    the speed layer's answers until that day ends (as Airflow refuses a run
    dated in the future unless told otherwise).
    """
    horizon = horizon_after(day)
    if horizon > now:
        raise typer.BadParameter(
            f"{day} is not over yet (it is {format_instant(now)}): its version would hold part "
            f"of the day and publish a horizon of {format_instant(horizon)}, which hides the "
            "speed layer's answers until then; pass --allow-open-day for data on a simulated clock",
            param_hint="'--date'",
        )


def summary_table(report: RunReport) -> Table:
    assert report.version is not None
    table = Table(
        title=f"batch run for {report.run_date} -> version {report.version.version}"
        + (f" of generation {report.version.generation}" if report.version.generation > 1 else ""),
        show_header=False,
        caption=f"rows: what the version holds, event dates up to {report.run_date}; "
        "records of later dates wait in the master dataset for the run of their date",
    )
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    table.add_row("records ingested", f"{report.records_ingested:,}")
    table.add_row("  of which dead letters", f"{report.dead_letters_ingested:,}")
    table.add_row("ingest micro-batches", str(report.ingest_batches))
    dates = report.recomputed_dates
    shown = ", ".join(d.isoformat() for d in dates) if len(dates) <= 4 else (
        f"{dates[0]} .. {dates[-1]} ({len(dates)} dates)"
    )  # fmt: skip
    table.add_row("dates recomputed", shown or "none")
    if report.views_changed:
        table.add_row("  because", "the view settings changed: every date")
    for name, count in report.version.row_counts.items():
        table.add_row(f"rows: {name}", f"{count:,}")
    table.add_row("horizon", format_instant(report.version.horizon))
    for step in ("ingest", "recompute", "publish", "total"):
        table.add_row(f"seconds: {step}", f"{report.seconds.get(step, 0.0):.1f}")
    return table


KEPT = (
    "the master dataset keeps everything it stored; `lambdaline batch reset-ingest` begins "
    "a new ingest checkpoint that goes on into it from what the topics hold now"
)


@batch_app.command("run")
def batch_run(
    run_date: Annotated[
        str | None,
        typer.Option("--date", help="last event date to recompute (default: yesterday, UTC)"),
    ] = None,
    lookback_days: Annotated[
        int | None,
        typer.Option("--lookback-days", min=0, help="days up to --date recomputed every run"),
    ] = None,
    allow_open_day: Annotated[
        bool,
        typer.Option(
            "--allow-open-day",
            help="allow a --date that is not over yet (UTC), for data on a simulated clock "
            "such as the demo's; its horizon hides the speed layer's answers until then",
        ),
    ] = False,
    generation: Annotated[
        int | None,
        typer.Option(
            "--generation", min=1, help=f"{GENERATION_HELP}; without it, every live generation"
        ),
    ] = None,
) -> None:
    """Ingest Kafka into the master dataset, recompute views, publish a new version (of
    each live generation of the views, the served one first)."""
    day = _run_date(run_date)
    if not allow_open_day:
        require_closed(day, datetime.now(UTC))
    configure_logging()
    try:
        chosen = chosen_settings(get_settings(), generation)
    except GenerationError as error:
        raise _fail(str(error)) from None
    # SIGTERM unwinds (lambdaline.cli.main): the lock is released, Spark stopped
    spark = _spark_over_kafka(chosen[0])
    try:
        for settings in chosen:
            report = _run_one(spark, settings, day, lookback_days)
            console.print(summary_table(report))
    finally:
        spark.stop()


def _run_one(
    spark: SparkSession, settings: Settings, day: date, lookback_days: int | None
) -> RunReport:
    lookback = settings.batch.lookback_days if lookback_days is None else lookback_days
    try:
        return run_batch(spark, settings, day, lookback)
    except (BatchStoreError, MasterDatasetError) as error:
        raise _fail(str(error)) from None
    except KafkaDataLossError as error:
        raise _fail(
            f"{error}: the input topics were deleted and created again, the broker's data was "
            "lost, or retention deleted records the master dataset never stored. The ingest "
            f"stops rather than skip them, and the next run stops the same way; {KEPT}"
        ) from None
    except TopicsRecreatedError as error:
        raise _fail(f"{error}; {KEPT}") from None
    except QueryFailedError as error:  # the ingest; its checkpoint keeps what it committed
        failure = f"{error}{kafka_answers(settings.kafka)}"
        raise _fail(f"{failure}; the next run takes the ingest up where it stopped") from None


def _version_document(listed: ListedVersion) -> dict[str, Any]:
    manifest = listed.manifest
    return {
        "version": manifest.version,
        "path": manifest.path,
        "horizon": format_instant(manifest.horizon),
        "created_at": format_instant(manifest.created_at),
        "dates": len(manifest.dates),
        "row_counts": manifest.row_counts,
        "view_settings": manifest.view_settings,
        "lost_input": [lost.to_document() for lost in manifest.lost_input],
        "current": listed.current,
        "rolled_back": listed.rolled_back,
    }


@batch_app.command("versions")
def batch_versions(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    generation: Annotated[
        int | None, typer.Option("--generation", min=1, help=GENERATION_HELP)
    ] = None,
) -> None:
    """List the published versions kept in the batch store."""
    settings = _generation(generation)
    documents = [_version_document(listed) for listed in list_versions(settings.batch_store)]
    if as_json:
        print(json.dumps(documents, indent=2))
        return
    if not documents:
        console.print(f"no versions in {settings.batch_store} yet: run `lambdaline batch run`")
        return
    console.print(_versions_table(documents, settings.batch_store))


def _versions_table(documents: list[dict[str, Any]], store: Path) -> Table:
    """One row per version and table, so it reads in 80 columns (``--json`` for scripts)."""
    table = Table(
        # a store's path has no space to wrap at: folded, it stays within the width
        title=Text(f"batch versions in {store}", overflow="fold"),
        caption="* current: the version the API serves; ↩ rolled back: withdrawn, not served",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        show_edge=False,
    )
    for column in ("version", "horizon", "created at", "table"):
        table.add_column(column, no_wrap=True)
    table.add_column("rows", justify="right", no_wrap=True)
    names = [spec.name for spec in STORE_TABLES]
    for document in documents:
        heading = [
            f"{document['version']}{' *' if document['current'] else ''}"
            f"{' ↩' if document['rolled_back'] else ''}",
            document["horizon"][:16].replace("T", " "),
            document["created_at"][:16].replace("T", " "),
        ]
        for index, name in enumerate(names):
            table.add_row(
                *(heading if index == 0 else ["", "", ""]),
                name,
                f"{document['row_counts'].get(name, 0):,}",
                end_section=index == len(names) - 1,
            )
    return table


@batch_app.command("rollback")
def batch_rollback(
    version: Annotated[int, typer.Argument(help="the version to serve (see `batch versions`)")],
    generation: Annotated[
        int | None, typer.Option("--generation", min=1, help=GENERATION_HELP)
    ] = None,
) -> None:
    """Point CURRENT at another kept version (the API switches within seconds)."""
    settings = _generation(generation)
    try:
        manifest = rollback(settings.batch_store, version)
    except BatchStoreError as error:
        raise _fail(str(error)) from None
    horizon = format_instant(manifest.horizon)
    console.print(f"serving version {manifest.version} (horizon {horizon})")


@batch_app.command("reset-ingest")
def batch_reset_ingest(
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Go on into the same master dataset with a new ingest checkpoint, after the input
    topics were created again, Kafka lost records the checkpoint points at, or the
    checkpoint was deleted or put back from an older copy."""
    configure_logging()
    settings = get_settings()

    def confirm() -> None:
        if yes:
            return
        if not sys.stdin.isatty():
            raise _fail("nothing changed: confirm with --yes where there is no terminal")
        if not typer.confirm("Begin a new ingest checkpoint?"):
            raise _fail("nothing changed")

    spark = _spark_over_kafka(settings)
    try:
        reset = reset_ingest(spark, settings, console, confirm)
    except (BatchStoreError, MasterDatasetError, KafkaNotReadyError, OSError) as error:
        raise _fail(str(error)) from None
    finally:
        spark.stop()
    console.print(
        f"Done. The next `lambdaline batch run` ingests from there, as ingest batch "
        f"{reset.first_batch} on, and recomputes the dates its records touch.",
        highlight=False,
    )


def reset_ingest(
    spark: SparkSession, settings: Settings, out: Console, confirm: Callable[[], None]
) -> ingest_reset.IngestResetPlan:
    """``batch reset-ingest`` in ``spark``: under the batch store's run lock, plan the new
    ingest checkpoint, show the plan on ``out``, and carry it out once ``confirm`` returns
    (it raises to change nothing). Tests run it in their own session."""
    with run_lock(settings.batch_store_root):
        reset = ingest_reset.plan(spark, settings)
        out.print(_starts_table(reset))
        out.print(_what_reset_does(reset), highlight=False)
        confirm()
        ingest_reset.carry_out(spark, MasterDataset.of(settings), reset)
    return reset


def _starts_table(reset: ingest_reset.IngestResetPlan) -> Table:
    # on a narrow terminal (or none: 80 columns) the reason wraps, never a partition's name
    table = Table(
        Column("partition", no_wrap=True), "read to", "Kafka keeps", "starts at", "why",
        box=box.SIMPLE,
    )  # fmt: skip
    for item in reset.starts:
        table.add_row(
            f"{item.topic}-{item.partition}",
            "-" if item.read_to is None else f"{item.read_to:,}",
            f"{item.bounds.earliest:,}..{item.bounds.end:,}",
            "earliest" if item.starts_at == ingest_reset.EARLIEST else f"{item.starts_at:,}",
            item.why,
        )
    return table


def _what_reset_does(reset: ingest_reset.IngestResetPlan) -> str:
    aside = (
        f"sets the ingest checkpoint {reset.checkpoint} aside as {reset.aside} and begins a new one"
        if reset.aside
        else f"begins a new ingest checkpoint at {reset.checkpoint}"
    )
    said = (
        f"This {aside}, whose batches are numbered from {reset.first_batch}, each partition "
        "starting as above (read to: what the master dataset's ingest log says its newest "
        "batch had read). The master dataset keeps everything it stored."
    )
    if reset.lost:
        records = sum(lost.records for lost in reset.lost)
        said += (
            f" Kafka deleted {records:,} records before they were read: it records them as "
            "lost in the master dataset's ingest log, and every version published from now "
            "on lists them (`lost_input`; `/v1/status`: `batch_lost_input`)."
        )
    if reset.unfinished:
        batches = ", ".join(map(str, reset.unfinished))
        said += (
            f" It deletes the partitions of ingest batch {batches}, which a run stopped while "
            "writing it (the ingest log has no entry for it): the new checkpoint reads its "
            "records again."
        )
    return said


@batch_app.command("schedule")
def batch_schedule(
    cron: Annotated[
        str | None, typer.Option("--cron", help="cron expression (default: batch_cron setting)")
    ] = None,
) -> None:
    """Run `lambdaline batch run` on a cron schedule (UTC) until Ctrl-C, one run at a time."""
    configure_logging()
    settings = get_settings()
    expression = cron or settings.batch.cron
    try:
        check_cron(expression)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="'--cron'") from None
    scheduler = Scheduler(expression)
    first = next_run_after(expression, scheduler.clock())
    console.print(f"schedule {expression!r} (UTC): next run {first.isoformat()}; Ctrl-C stops")
    serve_until_signalled(scheduler)
