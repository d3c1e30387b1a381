"""``lambdaline generation ...``: change a view with no gap in what the API serves.

``start`` records a new generation of the views (the view settings this command is
given, and the view modules' code), creates its speed topics and starts its speed job,
which reads the input from where the served horizon needs it
(``shared.platform.generations.replay_from``). ``batch run`` then publishes its first
version (every date: its store is new). ``status`` shows each generation's job, lag,
watermark and batch version; ``promote`` replaces ``ACTIVE`` once the new generation
is ready (:func:`waiting_for`); the API switches at its next request. ``rollback``
serves the previous generation again; ``retire`` stops a generation's job and deletes
its checkpoint, topics and batch store.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from kafka.errors import KafkaError
from rich import box
from rich.console import Console
from rich.table import Table

from shared.domain.events import format_instant
from shared.platform.batch_store import BatchVersion, read_current
from shared.platform.generations import (
    Active,
    Generation,
    GenerationError,
    JobFacts,
    aware_utc,
    generations_lock,
    input_lag,
    live,
    of_settings,
    read_active,
    read_generations,
    replay_from,
    retire_record,
    settings_of,
    waiting_for,
    write_active,
    write_generation,
)
from shared.platform.generations import delete_batch_store as delete_generation_store
from shared.platform.kafka_admin import (
    KafkaNotReadyError,
    offset_bounds,
    require_kafka,
)
from shared.platform.logs import configure_logging
from shared.platform.process_groups import end_group, runs_as
from shared.platform.speed_reader import read_speed_store
from shared.platform.topic_admin import TopicDeletionError, create_topics, delete_topics
from shared.settings import Settings, describe_view_settings, get_settings, parse_duration
from speed_layer.checkpoint import VIEW_SETTINGS_FILE, CheckpointError, checkpoint_dir

generation_app = typer.Typer(
    help="Generations of the views: change a view's settings or code with no gap in what "
    "the API serves (docs/architecture.md, Generations)."
)
out = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True)

JOB_STOP_S = 60.0
"""How long a retired generation's speed job gets to stop after SIGTERM (it stops its
queries, each within 30 s), before its process group is killed."""

CLI = (sys.executable, "-m", "lambdaline.cli")
SAY_EVERY_S = 10.0
"""How often ``promote --when-ready`` says what it still waits for."""


def _fail(message: str) -> typer.Exit:
    errors.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(1)


# --- what each generation is doing ------------------------------------------------------


@dataclass(frozen=True)
class GenerationState:
    generation: Generation
    served: bool
    job: JobFacts
    batch: BatchVersion | None
    waiting_for: tuple[str, ...] = ()
    """What it waits for before it can be promoted (nothing: ready; the served one: ())."""

    @property
    def ready(self) -> bool:
        return not self.served and not self.waiting_for

    def to_document(self) -> dict[str, Any]:
        batch = self.batch
        return {
            **self.generation.to_document(),
            "served": self.served,
            "job_pid": self.job.pid,
            "speed_watermark": format_instant(self.job.watermark) if self.job.watermark else None,
            "speed_lag_records": self.job.lag,
            "speed_error": self.job.error,
            "batch_version": batch.version if batch else None,
            "batch_horizon": format_instant(batch.horizon) if batch else None,
            "ready": self.ready,
            "waiting_for": list(self.waiting_for),
        }


def job_pid(settings: Settings) -> int | None:
    """The pid of the speed job holding the generation's checkpoint, if it runs here.

    The job writes its pid into the lock file (``shared.platform.locks``); a pid the
    kernel gave to another process since is not taken for it (``runs_as``)."""
    lock = checkpoint_dir(settings).with_name(f"{checkpoint_dir(settings).name}.lock")
    try:
        text = lock.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    return pid if runs_as(pid, "speed", "run") else None


def job_facts(settings: Settings) -> JobFacts:
    """The speed job's watermark and lag: its latest progress report per query, read from
    its ``speed.progress`` topic, against the input topics' end offsets."""
    pid = job_pid(settings)
    try:
        tables = read_speed_store(settings, views=(), timeout_s=30)
        try:
            reports = dict(tables.reports)
            watermark = tables.watermark
        finally:
            tables.close()
        bounds = offset_bounds(settings.kafka, settings.topics.inputs())
    except (KafkaError, KafkaNotReadyError, TimeoutError) as error:
        return JobFacts(None, None, pid, f"{type(error).__name__}: {error}")
    ends = {partition: int(bound.end) for partition, bound in bounds.items()}
    return JobFacts(aware_utc(watermark), input_lag(reports, ends), pid)


def states(base: Settings) -> tuple[Active, list[GenerationState]]:
    """``ACTIVE`` and each live generation's state, oldest first."""
    root = base.batch_store_root
    active = read_active(root)
    found = []
    for generation in live(read_generations(root)):
        settings = base.updated(generation=generation.number, **generation.view_settings)
        found.append(
            GenerationState(
                generation=generation,
                served=generation.number == active.generation,
                job=job_facts(settings),
                batch=read_current(settings.batch_store),
            )
        )
    served = next((state for state in found if state.served), None)
    if served is None:
        return active, found
    return active, [
        state if state.served else replace(state, waiting_for=_waiting_for(state, served, base))
        for state in found
    ]


def _waiting_for(
    state: GenerationState, served: GenerationState, base: Settings
) -> tuple[str, ...]:
    reasons = waiting_for(
        state.generation, state.batch, state.job, served.job.watermark, base.speed
    )
    if reasons and state.job.pid is None:
        number = state.generation.number
        reasons.append(
            f"(no speed job of it runs here: `lambdaline speed run --generation {number}`)"
        )
    return tuple(reasons)


# --- commands ---------------------------------------------------------------------------


def _first_generation(base: Settings) -> Generation:
    """Generation 1's record, for a deployment that has not recorded one: the view
    settings its speed checkpoint was made with, else its published version's."""
    first = base.updated(generation=1)
    recorded = checkpoint_dir(first) / VIEW_SETTINGS_FILE
    if recorded.exists():
        made_with = json.loads(recorded.read_text(encoding="utf-8"))
    elif (version := read_current(first.batch_store)) is not None:
        made_with = version.view_settings
    else:
        raise GenerationError(
            "nothing has been computed yet (no speed checkpoint, no batch version): change "
            "the view settings and start the layers with them, no generation needed"
        )
    return of_settings(base.updated(generation=1, **made_with), 1)


@generation_app.command("start")
def generation_start(
    job: Annotated[
        bool,
        typer.Option(
            "--job/--no-job",
            help="start its speed job here, in the background (--no-job: your supervisor "
            "runs `lambdaline speed run --generation N`)",
        ),
    ] = True,
) -> None:
    """Start a new generation with the view settings given (environment, settings file)
    beside the served one: its topics and its speed job."""
    configure_logging()
    base = get_settings()
    root = base.batch_store_root
    try:
        with generations_lock(root):
            recorded = read_generations(root)
            if not recorded:
                first = _first_generation(base)
                write_generation(root, first)
                recorded = {1: first}
            active = read_active(root)
            number = max(recorded) + 1
            new = of_settings(base, number)
            for other in live(recorded):
                if other.fingerprint == new.fingerprint:
                    raise GenerationError(
                        f"{other.label} already computes these views "
                        f"({other.describe()}); change a view setting or a view's code first"
                    )
            settings = settings_of(base, new)
            served = read_current(base.updated(generation=active.generation).batch_store)
            horizon = served.horizon if served is not None else None
            new = replace(new, replay_from=replay_from(settings, horizon), covers_from=horizon)
            require_kafka(settings.kafka, settings.topics.inputs())
            write_generation(root, new)
            create_topics(settings)
    except (GenerationError, KafkaNotReadyError) as error:
        raise _fail(str(error)) from None
    served_generation = recorded.get(active.generation)
    change = describe_change(served_generation, new) if served_generation else new.describe()
    out.print(f"started {new.label}: {change}", highlight=False)
    if new.replay_from is not None:
        out.print(
            f"its speed job reads the input from {format_instant(new.replay_from)}: what its "
            f"rows from the served horizon {format_instant(new.covers_from)} on need",  # type: ignore[arg-type]
            highlight=False,
        )
    if job:
        pid, log = start_job(settings)
        out.print(f"its speed job runs as pid {pid}, logging to {log}", highlight=False)
    out.print(
        f"next: `lambdaline batch run --generation {number}`, then "
        "`lambdaline generation promote --when-ready`",
        highlight=False,
    )


def start_job(settings: Settings) -> tuple[int, Path]:
    """Start the generation's speed job in the background, in a session of its own (so
    ``retire`` can stop its group); returns its pid and log file."""
    log = settings.logs_dir / f"speed.g{settings.generation}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [*CLI, "speed", "run", "--generation", str(settings.generation)],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True, env=os.environ.copy(),
        )  # fmt: skip
    return process.pid, log


@generation_app.command("status")
def generation_status(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Each live generation: served or not, its job, lag, watermark, batch version, and
    whether it is ready to be promoted (or what it waits for)."""
    configure_logging()
    base = get_settings()
    try:
        active, found = states(base)
    except GenerationError as error:
        raise _fail(str(error)) from None
    if as_json:
        document = {
            "active": active.generation,
            "previous": active.previous,
            "generations": [state.to_document() for state in found],
        }
        print(json.dumps(document, indent=2))
        return
    if not found:
        out.print(
            "one generation (1), never recorded: `lambdaline generation start` with other "
            "view settings starts a second",
            highlight=False,
        )
        return
    out.print(status_table(active, found))
    for state in found:
        for reason in state.waiting_for:
            out.print(f"generation {state.generation.number} waits for {reason}", highlight=False)


def status_table(active: Active, found: list[GenerationState]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, caption="* served; ready: may be promoted")
    for column in ("gen", "fingerprint", "view settings", "job", "watermark", "lag", "batch"):
        table.add_column(column)
    table.add_column("ready")
    for state in found:
        job, batch = state.job, state.batch
        table.add_row(
            f"{state.generation.number}{' *' if state.served else ''}",
            state.generation.fingerprint,
            state.generation.describe(),
            f"pid {job.pid}" if job.pid else "not running here",
            format_instant(job.watermark)[:19] if job.watermark else "-",
            f"{job.lag:,}" if job.lag is not None else "-",
            f"v{batch.version} to {format_instant(batch.horizon)[:10]}" if batch else "-",
            "served" if state.served else ("yes" if state.ready else "no"),
        )
    return table


def _candidate(active: Active, found: list[GenerationState], number: int | None) -> GenerationState:
    if number is not None:
        chosen = next((state for state in found if state.generation.number == number), None)
        if chosen is None:
            raise GenerationError(
                f"no live generation {number}: see `lambdaline generation status`"
            )
    else:
        newer = [state for state in found if state.generation.number > active.generation]
        if not newer:
            raise GenerationError(
                f"no generation newer than the served one ({active.generation}): "
                "`lambdaline generation start` starts one"
            )
        chosen = newer[-1]
    if chosen.served:
        raise GenerationError(f"{chosen.generation.label} is served already")
    return chosen


@generation_app.command("promote")
def generation_promote(
    number: Annotated[
        int | None, typer.Argument(help="the generation (default: the newest)", min=1)
    ] = None,
    when_ready: Annotated[
        bool, typer.Option("--when-ready", help="wait until it is ready, then promote it")
    ] = False,
    timeout: Annotated[
        str, typer.Option("--timeout", help="--when-ready waits at most this long")
    ] = "1h",
) -> None:
    """Serve a generation instead of the served one, once it is ready: ``ACTIVE`` is
    replaced whole, and each API worker switches at its next request."""
    configure_logging()
    base = get_settings()
    root = base.batch_store_root
    try:
        waited = parse_duration(timeout)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="'--timeout'") from None
    deadline = time.monotonic() + waited.total_seconds()
    said_at = -SAY_EVERY_S
    try:
        while True:
            with generations_lock(root):
                active, found = states(base)
                chosen = _candidate(active, found, number)
                if chosen.ready:
                    promoted = Active(
                        chosen.generation.number, active.generation, datetime.now(UTC)
                    )
                    write_active(root, promoted)
                    break
            reasons = chosen.waiting_for
            if not when_ready or time.monotonic() >= deadline:
                raise GenerationError(
                    f"{chosen.generation.label} is not ready to be served; it waits for "
                    + "; ".join(reasons)
                    + ("" if when_ready else " (--when-ready waits for it)")
                )
            if time.monotonic() >= said_at + SAY_EVERY_S:  # progress, not a line per poll
                errors.print(
                    f"generation {chosen.generation.number} waits for {'; '.join(reasons)}",
                    highlight=False,
                )
                said_at = time.monotonic()
            time.sleep(2.0)
    except GenerationError as error:
        raise _fail(str(error)) from None
    out.print(
        f"serving {chosen.generation.label}: {chosen.generation.describe()} "
        f"(was generation {active.generation}; `lambdaline generation rollback` goes back)",
        highlight=False,
    )


@generation_app.command("rollback")
def generation_rollback() -> None:
    """Serve the generation served before the last promotion again, while it is kept."""
    configure_logging()
    root = get_settings().batch_store_root
    try:
        with generations_lock(root):
            active = read_active(root)
            recorded = read_generations(root)
            back = active.previous
            if back is None or back not in recorded:
                raise GenerationError(
                    f"generation {active.generation} is served and none was before it"
                )
            if recorded[back].retired_at is not None:
                raise GenerationError(f"{recorded[back].label} was retired: it cannot be served")
            write_active(root, Active(back, active.generation, datetime.now(UTC)))
    except GenerationError as error:
        raise _fail(str(error)) from None
    out.print(f"serving {recorded[back].label} again: {recorded[back].describe()}", highlight=False)


@generation_app.command("retire")
def generation_retire(
    number: Annotated[int, typer.Argument(help="the generation to retire", min=1)],
) -> None:
    """Stop a generation's speed job and delete its checkpoint, speed topics and batch
    store (not the served one's)."""
    configure_logging()
    base = get_settings()
    root = base.batch_store_root
    try:
        with generations_lock(root):
            active = read_active(root)
            recorded = read_generations(root)
            if number not in recorded:
                raise GenerationError(f"no generation {number}: see `lambdaline generation status`")
            if number == active.generation:
                raise GenerationError(
                    f"generation {number} is served: promote another first (or roll back)"
                )
            generation = recorded[number]
            if generation.retired_at is None:  # first: nothing restarts or serves it now
                generation = retire_record(root, generation)
            settings = base.updated(generation=number, **generation.view_settings)
            require_kafka(settings.kafka)
            stopped = stop_job(settings)
            folder = checkpoint_dir(settings)
            if folder.exists():
                shutil.rmtree(folder)
            topics = delete_topics(settings.kafka, settings.speed_topics.speed_store())
            stores = delete_generation_store(settings)
    except (GenerationError, KafkaNotReadyError, TopicDeletionError, CheckpointError) as error:
        raise _fail(str(error)) from None
    out.print(
        f"retired {generation.label}: "
        + (f"stopped its speed job (pid {stopped}); " if stopped else "no speed job ran here; ")
        + f"deleted its checkpoint {folder}, {len(topics)} topics"
        + (f" and its batch store {', '.join(map(str, stores))}" if stores else ""),
        highlight=False,
    )


def stop_job(settings: Settings) -> int | None:
    """SIGTERM the generation's speed job (by the pid in its checkpoint's lock) and wait
    for it, then end its process group; returns the pid, None if none ran."""
    pid = job_pid(settings)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + JOB_STOP_S
    while runs_as(pid, "speed", "run") and time.monotonic() < deadline:
        time.sleep(0.2)
    end_group(pid, 0.0 if runs_as(pid, "speed", "run") else 10.0)
    return pid


def describe_change(old: Generation, new: Generation) -> str:
    """The view settings that differ between two generations, as people read them."""
    changed = {
        name: f"{old.view_settings.get(name)} -> {value}"
        for name, value in new.view_settings.items()
        if old.view_settings.get(name) != value
    }
    return describe_view_settings(changed) if changed else "the same settings, other code"
