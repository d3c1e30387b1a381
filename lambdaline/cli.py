"""The ``lambdaline`` command: one entry point, one sub-command group per concern.

Settings are read once, at the start of every command (``get_settings``); a bad
setting stops the command with exit code 2 and a line naming the setting.

SIGTERM and SIGHUP end a command as Ctrl-C would, through its ``finally``
blocks (``lambdaline.processes.exit_on_signals``), so what it started (the
generator's producer processes, the benchmark's broker and jobs, a batch run's
Spark and lock) stops with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from kafka.errors import KafkaConnectionError, KafkaTimeoutError
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from batch_layer.cli import batch_app
from lambdaline import demo as demo_app
from lambdaline import generator as event_generator
from lambdaline import kafka_broker, spark_cluster
from lambdaline.generations import generation_app
from lambdaline.processes import exit_on_signals
from serving.cli import serve
from shared.domain.events import format_instant, parse_instant
from shared.platform.jvm import (
    JarResolutionError,
    JavaCompileError,
    JdkToolMissingError,
    JvmProfile,
    resolve_jars,
)
from shared.platform.kafka_admin import KafkaNotReadyError, unreachable
from shared.platform.locks import LockHeldError
from shared.platform.logs import configure_logging
from shared.platform.topic_admin import TopicOutcome, create_topics, replication
from shared.settings import (
    Settings,
    SettingsError,
    describe_validation_error,
    get_settings,
    parse_duration,
)
from speed_layer.cli import speed_app
from speed_layer.operator import operators_jar

# soft wrap: a line longer than the terminal (a path, an error) is never broken
# in two, so it stays whole when piped to a log or copied
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)

app = typer.Typer(
    help="lambdaline: a reference Lambda architecture on Kafka, Spark, DuckDB and FastAPI.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
kafka_app = typer.Typer(help="The embedded Apache Kafka cluster: one KRaft node, or several.")
spark_app = typer.Typer(help="A Spark standalone cluster on this machine: a master, workers.")
topics_app = typer.Typer(help="Kafka topics of lambdaline.")
jvm_app = typer.Typer(help="JVM jars (broker, Spark Kafka connector) resolved by Maven.")
app.add_typer(kafka_app, name="kafka")
app.add_typer(spark_app, name="spark")
app.add_typer(topics_app, name="topics")
app.add_typer(jvm_app, name="jvm")
app.add_typer(speed_app, name="speed")
app.add_typer(batch_app, name="batch")
app.add_typer(generation_app, name="generation")
app.command("serve")(serve)


def _settings() -> Settings:
    try:
        return get_settings()
    except SettingsError as error:
        for line in str(error).splitlines():
            console.print(f"[red]error:[/red] {line}", highlight=False)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _clear_errors() -> Iterator[None]:
    """Turn the project's expected failures into one red line and a non-zero exit."""
    try:
        yield
    except (
        kafka_broker.BrokerError,
        spark_cluster.SparkClusterError,
        event_generator.NotAcknowledgedError,
        JarResolutionError,
        JavaCompileError,
        JdkToolMissingError,
        KafkaNotReadyError,
        LockHeldError,
    ) as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(1) from None
    except (KafkaTimeoutError, KafkaConnectionError) as error:
        console.print(
            f"[red]error:[/red] {unreachable(get_settings().kafka, error)}", highlight=False
        )
        raise typer.Exit(1) from None


@app.callback()
def main_callback() -> None:
    """Validate settings before any command runs."""
    _settings()


# --- jvm ---------------------------------------------------------------------------


@jvm_app.command("resolve")
def jvm_resolve() -> None:
    """Resolve the broker and connector jars from Maven Central and compile the speed
    layer's operators (idempotent)."""
    settings = _settings()
    with _clear_errors():
        for profile in JvmProfile:
            with console.status(f"resolving {profile.value} jars with Maven"):
                jars = resolve_jars(settings.jvm_cache_dir, profile)
            out.print(f"{profile.value}: {len(jars)} jars in {jars[0].parent}")
        with console.status("compiling the speed layer's operators"):
            operators = operators_jar(settings.jvm_cache_dir)
        out.print(f"speed operators: {operators}")


# --- kafka -------------------------------------------------------------------------


@kafka_app.command("start")
def kafka_start(
    brokers: Annotated[
        int | None,
        typer.Option(
            "--brokers", min=1, max=9,
            help="nodes of the cluster (default: LAMBDALINE_KAFKA_BROKERS, 1); node i listens "
            "on the bootstrap port + i - 1",
        ),
    ] = None,
) -> None:  # fmt: skip
    """Start the embedded cluster's nodes that do not run and wait until all have joined."""
    settings = _settings()
    if brokers is None:
        settings = kafka_broker.cluster_settings(settings)
    elif brokers != settings.kafka.brokers:
        settings = _updated(settings, kafka_brokers=brokers)
    with _clear_errors():
        before = kafka_broker.status(settings)
        with console.status(f"starting Kafka on {settings.kafka.bootstrap}"):
            state = kafka_broker.start(settings)
    for node, was in zip(state.nodes, before.nodes, strict=True):
        verb = "already running" if was.running else "started"
        out.print(f"node {node.node.id} {verb}: pid {node.pid}, {node.node.address}")
        out.print(f"  data {node.paths.data}  log {node.paths.log_file}")
    factor, min_isr = replication(len(state.nodes))
    out.print(
        f"bootstrap {state.bootstrap}; topics get replication factor {factor}, "
        f"min.insync.replicas {min_isr}"
    )
    if len(state.nodes) != get_settings().kafka.brokers:
        out.print(
            f"clients: export LAMBDALINE_KAFKA_BROKERS={len(state.nodes)} so that they "
            "bootstrap from every node"
        )


def _updated(settings: Settings, **changes: Any) -> Settings:
    """These settings with an option's changes, or exit 2 naming what the option breaks."""
    try:
        return settings.updated(**changes)
    except ValidationError as error:
        for line in describe_validation_error(error).splitlines():
            console.print(f"[red]error:[/red] {line}", highlight=False)
        raise typer.Exit(2) from None


@kafka_app.command("stop")
def kafka_stop() -> None:
    """Stop every node of the embedded cluster (by its pid) and wait until all have exited."""
    settings = _settings()
    with console.status("stopping Kafka"):
        pids = kafka_broker.stop(settings)
    if pids:
        out.print(f"kafka stopped ({len(pids)} nodes: pids {', '.join(map(str, pids))})")
    else:
        out.print("kafka was not running")


@kafka_app.command("status")
def kafka_status() -> None:
    """Each node of the embedded cluster, the active controller and any under-replicated
    partitions. Exits 3 if a node does not run."""
    settings = kafka_broker.cluster_settings(_settings())
    state = kafka_broker.status(settings)
    for node in state.nodes:
        role = " (active controller)" if node.node.id == state.controller else ""
        joined = state.registered is not None and node.node.id in state.registered
        if node.running:
            said = f"running: pid {node.pid}, {'joined' if joined else 'not joined'}"
        else:
            said = "not running"
        out.print(f"node {node.node.id} {node.node.address} {said}{role}")
        out.print(f"  data {node.paths.data}  log {node.paths.log_file}")
    out.print(f"answering on {state.bootstrap}: {'yes' if state.answering else 'no'}")
    if state.answering:
        out.print(f"under-replicated partitions: {len(state.under_replicated) or 'none'}")
        for part in state.under_replicated:
            in_sync = ",".join(map(str, part.isr)) or "none"
            out.print(
                f"  {part.topic}-{part.partition}: in sync {in_sync} "
                f"of replicas {','.join(map(str, part.replicas))}"
            )
    if not state.running:
        raise typer.Exit(3)


# --- spark -------------------------------------------------------------------------


@spark_app.command("start")
def spark_start(
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", min=1, max=8, help="workers (default: LAMBDALINE_SPARK_WORKERS, 2)"
        ),
    ] = None,
) -> None:
    """Start the standalone master and workers that do not run; wait until all registered."""
    settings = _settings()
    if workers is not None:
        settings = _updated(settings, spark_workers=workers)
    with _clear_errors():
        before = spark_cluster.status(settings)
        with console.status(f"starting Spark at {spark_cluster.master_url(settings)}"):
            state = spark_cluster.start(settings)
    for daemon, was in zip(state.daemons, before.daemons, strict=True):
        verb = "already running" if was.running else "started"
        out.print(f"spark {daemon.daemon.name} {verb}: pid {daemon.pid}")
        out.print(f"  log {daemon.daemon.log_file}")
    spark = settings.spark
    out.print(
        f"{state.alive_workers} workers of {spark.worker_cores} cores and "
        f"{spark.worker_memory}; an application gets {spark_cluster.default_cores(settings)} "
        f"cores unless it sets spark.cores.max; web UI {state.web_ui}"
    )
    out.print(f"run both layers on it: export LAMBDALINE_SPARK_MASTER={state.master_url}")


@spark_app.command("stop")
def spark_stop() -> None:
    """Stop the workers (and their executors), then the master, by pid."""
    settings = _settings()
    with _clear_errors(), console.status("stopping Spark"):
        pids = spark_cluster.stop(settings)
    if pids:
        out.print(f"spark stopped ({len(pids)} daemons: pids {', '.join(map(str, pids))})")
    else:
        out.print("spark was not running")


@spark_app.command("status")
def spark_status() -> None:
    """The master and each worker: pid, and what the master says. Exits 3 if one is down."""
    settings = _settings()
    state = spark_cluster.status(settings)
    for daemon in state.daemons:
        said = f"running: pid {daemon.pid}" if daemon.running else "not running"
        out.print(f"spark {daemon.daemon.name} {said}  log {daemon.daemon.log_file}")
    if state.state is None:
        out.print(f"master at {state.master_url}: not answering ({state.web_ui}/json/)")
    else:
        master = state.state
        out.print(
            f"master at {state.master_url}: {master.get('status')}, "
            f"{state.alive_workers} workers alive, cores {master.get('coresused')}/"
            f"{master.get('cores')} used, web UI {state.web_ui}"
        )
        for application in master.get("activeapps", []):
            out.print(
                f"  application {application.get('name')} ({application.get('id')}): "
                f"{application.get('cores')} cores, {application.get('state')}"
            )
    if not state.running:
        raise typer.Exit(3)


# --- topics ------------------------------------------------------------------------


@topics_app.command("create")
def topics_create() -> None:
    """Create the input, dead-letter and speed-store topics that do not exist yet."""
    settings = _settings()
    with _clear_errors(), console.status(f"creating topics on {settings.kafka.bootstrap}"):
        outcomes = create_topics(settings)
    out.print(topics_table(outcomes))


def topics_table(outcomes: list[TopicOutcome]) -> Table:
    """Each topic whole, one config entry per line (a narrow terminal folds, never cuts)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("topic", no_wrap=True)
    table.add_column("partitions", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column("config", overflow="fold")
    for outcome in outcomes:
        status = "created" if outcome.created else "exists"
        if outcome.partitions != outcome.spec.partitions:  # made with another setting
            status = f"exists (kafka_partitions is {outcome.spec.partitions})"
        table.add_row(
            outcome.spec.name,
            str(outcome.partitions),
            status,
            "\n".join(f"{key}={value}" for key, value in outcome.spec.config.items()),
        )
    return table


# --- generate ----------------------------------------------------------------------


def _instant(value: str, option: str) -> datetime:
    # parsed in the command's body, so the error names its option (click cannot know it)
    try:
        return parse_instant(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an instant with a time zone, e.g. 2026-01-05T06:00:00Z",
            param_hint=f"'{option}'",
        ) from None


def _duration(text: str, option: str) -> timedelta:
    parsed = parse_duration(text)
    if not isinstance(parsed, timedelta) or parsed <= timedelta(0):
        raise typer.BadParameter(
            f"{text!r} is not a positive duration like 90s, 3m or 1h", param_hint=f"'{option}'"
        )
    return parsed


def _print_summary(summary: event_generator.GeneratorSummary, target: str) -> None:
    table = Table("kind", "records", title=f"generated to {target}")
    for kind, count in sorted(summary.by_kind.items()):
        table.add_row(kind, f"{count:,}")
    table.add_row("[bold]total", f"[bold]{summary.records:,}")
    out.print(table)
    topics = Table("topic", "records")
    for topic, count in sorted(summary.by_topic.items()):
        topics.add_row(topic, f"{count:,}")
    out.print(topics)
    rate = summary.records / summary.seconds if summary.seconds else 0.0
    out.print(f"{summary.records:,} records in {summary.seconds:.1f} s = {rate:,.0f} records/s")
    if summary.first_timestamp_ms is not None and summary.last_timestamp_ms is not None:
        first = datetime.fromtimestamp(summary.first_timestamp_ms / 1000, UTC)
        last = datetime.fromtimestamp(summary.last_timestamp_ms / 1000, UTC)
        out.print(f"simulated send times {first:%Y-%m-%dT%H:%M:%SZ} .. {last:%Y-%m-%dT%H:%M:%SZ}")


_GENERATOR_DEFAULTS = event_generator.GeneratorConfig(events=100_000)
_DEFAULT_START = format_instant(_GENERATOR_DEFAULTS.start)
_DEFAULT_LATE_MEAN = f"{int(_GENERATOR_DEFAULTS.late_mean.total_seconds())}s"


def _fraction(help_text: str) -> Any:
    return typer.Option(min=0.0, max=1.0, help=help_text)


@app.command()
def generate(
    events: Annotated[
        int, typer.Option(min=0, help="toll entries (exits, registrations follow)")
    ] = _GENERATOR_DEFAULTS.events,
    seed: Annotated[
        int, typer.Option(help="same seed and options, same bytes")
    ] = _GENERATOR_DEFAULTS.seed,
    rate: Annotated[
        float, typer.Option(min=0, help="cap in records/s; 0 = as fast as possible")
    ] = _GENERATOR_DEFAULTS.rate,
    start: Annotated[
        str, typer.Option(help="simulated start (ISO-8601), or 'now'")
    ] = _DEFAULT_START,
    speedup: Annotated[
        float, typer.Option(min=0, help="simulated s per real s; 0 = no pacing")
    ] = _GENERATOR_DEFAULTS.speedup,
    traffic: Annotated[
        float, typer.Option(min=0.001, help="entries per simulated second")
    ] = _GENERATOR_DEFAULTS.traffic,
    booths: Annotated[int, typer.Option(min=1)] = _GENERATOR_DEFAULTS.booths,
    plates: Annotated[int, typer.Option(min=1)] = _GENERATOR_DEFAULTS.plates,
    late: Annotated[float, _fraction("fraction of records sent late")] = _GENERATOR_DEFAULTS.late,
    late_mean: Annotated[
        str, typer.Option(help="mean lateness of late records")
    ] = _DEFAULT_LATE_MEAN,
    duplicate: Annotated[
        float, _fraction("fraction of records sent twice")
    ] = _GENERATOR_DEFAULTS.duplicate,
    malformed: Annotated[
        float, _fraction("extra malformed records, per entry")
    ] = _GENERATOR_DEFAULTS.malformed,
    expired: Annotated[
        float, _fraction("plates whose registration expired")
    ] = _GENERATOR_DEFAULTS.expired,
    unregistered: Annotated[
        float, _fraction("plates never registered")
    ] = _GENERATOR_DEFAULTS.unregistered,
    missing_exit: Annotated[
        float, _fraction("entries without exit")
    ] = _GENERATOR_DEFAULTS.missing_exit,
    duration: Annotated[
        str | None, typer.Option(help="stop after this much simulated time, e.g. 10m")
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", dir_okay=False, help="write JSON lines here instead of Kafka"),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="producer processes (default: cores)")
    ] = None,
) -> None:
    """Generate a seeded toll-booth stream to Kafka (or to a JSON-lines file)."""
    settings = _settings()
    lateness = _duration(late_mean, "--late-mean")
    stop_after = None if duration is None else _duration(duration, "--duration")
    first = (
        datetime.now(UTC).replace(microsecond=0) if start == "now" else _instant(start, "--start")
    )
    try:
        config = event_generator.GeneratorConfig(
            events=events, seed=seed,
            start=first,
            traffic=traffic, rate=rate, speedup=speedup, booths=booths, plates=plates,
            late=late, late_mean=lateness, duplicate=duplicate, malformed=malformed,
            expired=expired, unregistered=unregistered, missing_exit=missing_exit,
            duration=stop_after,
        )  # fmt: skip
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    with _clear_errors():
        summary = _run_generator(config, settings, out_file, workers)
    _print_summary(summary, str(out_file) if out_file else settings.kafka.bootstrap)


def _run_generator(
    config: event_generator.GeneratorConfig,
    settings: Settings,
    out_file: Path | None,
    workers: int | None,
) -> event_generator.GeneratorSummary:
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,} records"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("generating", total=None)

        def advance(count: int) -> None:
            progress.advance(task, count)

        if out_file is not None:
            return event_generator.write_json_lines(config, settings, out_file, advance)
        return event_generator.send_to_kafka(config, settings, workers, advance)


# --- demo -------------------------------------------------------------------------------


@app.command()
def demo(
    port: Annotated[int, typer.Option(min=1, max=65535, help="port of the API")] = 8000,
    host: Annotated[str, typer.Option(help="interface the API listens on")] = "127.0.0.1",
    fresh: Annotated[
        bool, typer.Option("--fresh", help="delete the demo's earlier state and begin anew")
    ] = False,
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="on a Kafka cluster of three brokers and a Spark standalone cluster "
            "(LAMBDALINE_SPARK_WORKERS workers), started here",
        ),
    ] = False,
) -> None:
    """Run the whole Lambda system in simulated time until Ctrl-C.

    Broker, generator, speed job, batch schedule and API, each a process of its own.

    Ctrl-C stops every process it started, by pid."""
    settings = _settings()
    with _clear_errors():
        try:
            code = demo_app.run(settings, host, port, fresh, console, cluster)
        except demo_app.DemoError as error:
            console.print(f"[red]error:[/red] {error}", highlight=False)
            raise typer.Exit(1) from None
    raise typer.Exit(code)


# --- bench ------------------------------------------------------------------------------


def _print_report(folder: Path) -> None:
    """A benchmark's table (report.md's table rows) and where its files are."""
    for line in (folder / "report.md").read_text().splitlines():
        if line.startswith("|"):
            out.print(line, highlight=False, soft_wrap=True)
    out.print(f"results: {folder}/results.json, report.md, *.png")


bench_app = typer.Typer(
    help="Benchmarks on this machine: both layers side by side (no subcommand), or a soak."
)
app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
def bench(
    context: typer.Context,
    events: Annotated[int, typer.Option(min=1000, help="events in the seeded dataset")] = 1_000_000,
    out_dir: Annotated[
        Path,
        typer.Option("--out", file_okay=False, help="results go to a new folder under this one"),
    ] = Path("bench-results"),
    seed: Annotated[int, typer.Option(help="generator seed")] = 7,
    probes: Annotated[int, typer.Option(min=1, help="timed freshness probes")] = 20,
    load_rates: Annotated[
        str, typer.Option(help="offered request rates of the serving load, comma-separated")
    ] = "25,50,100,200",
    load_seconds: Annotated[float, typer.Option(min=0.5, help="seconds per load rate")] = 8.0,
) -> None:
    """Run one seeded dataset through both layers on this machine and compare them.

    Writes results.json, report.md and PNG charts to a new folder under --out."""
    if context.invoked_subcommand is not None:
        return
    from lambdaline.bench import run as bench_run  # matplotlib and co.: only for this command

    settings = _settings()
    try:
        rates = tuple(float(rate) for rate in load_rates.split(","))
    except ValueError:
        raise typer.BadParameter(f"{load_rates!r}: not numbers like 25,50,100") from None
    options = bench_run.BenchOptions(
        events=events, out=out_dir, seed=seed, probes=probes, load_rates=rates,
        load_seconds=load_seconds,
    )  # fmt: skip
    with _clear_errors():
        try:
            folder = bench_run.run(settings, options, console)
        except bench_run.BenchError as error:
            console.print(f"[red]error:[/red] {error}", highlight=False)
            raise typer.Exit(1) from None
    _print_report(folder)


@bench_app.command("soak")
def bench_soak(
    rate: Annotated[float, typer.Option(min=1, help="input events per second")] = 2000.0,
    minutes: Annotated[
        float, typer.Option(min=1, help="minutes at --rate (state fills in max_trip + watermark)")
    ] = 95.0,
    ramp: Annotated[
        str, typer.Option(help="higher rates after the soak, comma-separated, one step each")
    ] = "",
    step_minutes: Annotated[float, typer.Option(min=1, help="minutes per ramp step")] = 15.0,
    outage_minutes: Annotated[
        float,
        typer.Option(min=0, help="minutes the speed driver stays killed after the soak (0: none)"),
    ] = 5.0,
    recovery_minutes: Annotated[
        float, typer.Option(min=1, help="minutes to watch it recover after the outage")
    ] = 15.0,
    floor_minutes: Annotated[
        float, typer.Option(min=0, help="minutes of the floor job at --rate (0: none)")
    ] = 5.0,
    probe_every: Annotated[float, typer.Option(min=1, help="seconds between probes")] = 30.0,
    profile_at: Annotated[
        str,
        typer.Option(
            help="minutes into the soak at which to profile the speed JVM for a minute "
            "(per thread from the kernel, per method from a JFR recording), comma-separated"
        ),
    ] = "",
    out_dir: Annotated[
        Path,
        typer.Option("--out", file_okay=False, help="results go to a new folder under this one"),
    ] = Path("bench-results"),
) -> None:
    """Run the speed job, the API and the generator at a steady rate for a long time.

    Samples lag, memory, state and freshness every 10 s; then runs the floor job.
    Writes results.json, report.md and time-series PNGs to a new folder under --out."""
    from lambdaline.bench import soak  # matplotlib and co.: only for this command

    def numbers(text: str, option: str, example: str) -> tuple[float, ...]:
        try:
            return tuple(float(part) for part in text.split(",") if part.strip())
        except ValueError:
            message = f"{text!r}: not numbers like {example}"
            raise typer.BadParameter(message, param_hint=option) from None

    options = soak.SoakOptions(
        rate=rate, minutes=minutes, out=out_dir, ramp=numbers(ramp, "--ramp", "3000,4000"),
        step_minutes=step_minutes, floor_minutes=floor_minutes, probe_every_s=probe_every,
        outage_minutes=outage_minutes, recovery_minutes=recovery_minutes,
        profile_at=numbers(profile_at, "--profile-at", "15,50"),
    )  # fmt: skip
    with _clear_errors():
        try:
            folder = soak.run(_settings(), options, console)
        except soak.SoakError as error:
            console.print(f"[red]error:[/red] {error}", highlight=False)
            raise typer.Exit(1) from None
    _print_report(folder)


@bench_app.command("floor-job", hidden=True)
def bench_floor_job() -> None:
    """The soak's floor job (``lambdaline.bench.floor``), until SIGINT/SIGTERM."""
    from lambdaline.bench.floor import run_floor

    configure_logging()
    run_floor(_settings())


def main() -> None:
    exit_on_signals()  # commands that stop in a way of their own set their own handlers
    app()


if __name__ == "__main__":
    main()
