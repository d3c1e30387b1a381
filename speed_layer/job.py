"""The speed layer: one continuous Structured Streaming application.

Reads the three input topics with Spark's Kafka source, decodes them once with
the shared rule, computes the views in one stateful operator under the
entries' event-time watermark (``speed_layer.operator``), and writes each view
to its compacted ``speed.<view>`` topic and invalid records to
``dead.letters``. A view added as a query of its own (``Lane.OWN_QUERY``) reads
the entries itself; the diagnostics are counted from the operator's internal
topic. With ``available_now`` it processes what Kafka holds and stops.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from shared.domain.events import EVENT_TYPES, TOLL_ENTRY, EventType
from shared.domain.validation import decode_records, decode_together
from shared.domain.views import reaches_of
from shared.domain.views.rules import COUNTED_INPUTS, without_duplicates
from shared.domain.views.view import Inputs, Lane
from shared.platform.logs import log_event
from shared.platform.spark_session import spark_session
from shared.platform.streaming import (
    from_times,
    kafka_stream,
    raise_if_failed,
    stop_query,
    stop_requests,
    wait_for,
)
from shared.settings import Settings
from shared.settings.views import REGISTERED
from speed_layer.checkpoint import (
    ROCKSDB_PROVIDER,
    STATE_STORE_PROVIDER_CONF,
    checkpoint_dir,
    claim_state_store,
)
from speed_layer.operator import (
    diagnostic_counts,
    operator_input,
    operator_views,
    operators_jar,
    views_writer,
)
from speed_layer.progress import (
    ROW_TRACKING_CONF,
    ProgressPublisher,
    late_rows_reported,
    listening,
    rows_counted,
)
from speed_layer.speed_store import view_writer

logger = logging.getLogger("lambdaline.speed")

VIEWS_POOL, OTHERS_POOL = "speed.views", "speed.others"
"""Spark scheduler pools: the operator's query in one; the diagnostics count and any
view's own query in the other, so that none of theirs holds the operator's back."""

SCHEDULER_POOLS_FILE = Path(__file__).with_name("scheduler_pools.xml")
"""Declares :data:`VIEWS_POOL` and :data:`OTHERS_POOL` (equal weights, FIFO within)."""

JVM_OPTIONS = "-XX:-UseCodeCacheFlushing -XX:ReservedCodeCacheSize=512m"
"""The speed JVM's: compiled code is kept. With the JVM's default, its sweeper flushed
the code a micro-batch had run a second before as cold (33,000 methods in 30 s), and
the JIT compiled it again: 0.6 of a core, half the job's CPU (docs/performance.md: with
these, 0.02 cores at minute 50 of a soak). A long-running driver's code is a few
hundred MB at most."""

SPEED_SPARK_CONF: dict[str, str] = {
    # state off the heap, bounded by the watermark (speed_layer.lookups); a
    # checkpoint keeps the provider it was made with (checkpoint.claim_state_store)
    STATE_STORE_PROVIDER_CONF: ROCKSDB_PROVIDER,
    # each micro-batch uploads the changes of its state (a changelog), not a
    # snapshot of the whole store; snapshots are made in the background
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # one bound for the memory of every RocksDB instance of the JVM (block cache
    # and memtables), off the heap: the process's RSS stays within heap + this. The
    # plates' state at 2,000 events/s (582,000 plates, an hour of entries) is ~0.9 GB
    # in memory: with 256 MB a get missed the cache (and read and unpacked an index
    # block) most of the time, ~170 us a get against ~5 (benchmarks/plate_replay.py)
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "2048",
    # no count of the state's rows: Spark would read each key before it writes or
    # deletes it to keep one (a get per put; 28-43 % of the plates' CPU per event in
    # benchmarks/plate_replay.py). The state's size is RocksDB's bytes on disk
    # (speed_layer.progress.rows_counted)
    ROW_TRACKING_CONF: "false",
    # queries on few task slots: with Spark's default (FIFO) a micro-batch of the
    # operator waits for every task of another query's micro-batch submitted
    # before it; with fair pools it gets the next free slot
    "spark.scheduler.mode": "FAIR",
    "spark.scheduler.allocation.file": str(SCHEDULER_POOLS_FILE),
    # Spark plans and generates code for every micro-batch again, and finds the
    # compiled classes in a cache of 100 by default. The job's queries need more
    # than that (the decode stage is ~330 KB of Java), and the watermark is a
    # constant in the state-eviction predicates, so every micro-batch adds
    # classes: with 100, the decode stage is evicted and compiled again each
    # micro-batch, on the driver and in a task
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.driver.extraJavaOptions": JVM_OPTIONS,
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
}
"""The speed job's Spark tuning; measured in docs/performance.md ("The speed
layer"). The ``spark_conf`` setting overrides any of it."""


def speed_spark_session(settings: Settings, app_name: str = "lambdaline-speed") -> SparkSession:
    """The SparkSession the speed job wants: the shared one, with :data:`SPEED_SPARK_CONF`
    and the speed layer's operator (``speed_layer.operator.operators_jar``)."""
    return spark_session(
        settings,
        app_name,
        extra_config=SPEED_SPARK_CONF,
        extra_jars=[operators_jar(settings.jvm_cache_dir)],
    )


def read_input_topics(
    spark: SparkSession,
    settings: Settings,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
    starts: Mapping[str, datetime] | None = None,
    capped: bool = True,
) -> DataFrame:
    """A streaming read of the topics of these event types (raw Kafka records); ``starts``:
    a new checkpoint reads each topic named from its first record of that time on (the
    others from their earliest); ``capped``: a micro-batch reads at most the
    ``max_offsets_per_trigger`` setting, else all there is."""
    reader = kafka_stream(spark, settings.kafka, settings.topics.inputs(event_types))
    if starts:
        reader = from_times(reader, settings.kafka, starts)
    if capped and settings.speed.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", settings.speed.max_offsets_per_trigger)
    return reader.load()


def read_whole(settings: Settings) -> tuple[EventType, ...]:
    """The event types a micro-batch reads all of, uncapped: those a view looks up before
    the events it matches them to (``View.reaches`` starting before 0: registrations).

    Kafka's source shares ``maxOffsetsPerTrigger`` among partitions by offsets, not by
    time. Working off a backlog whose registrations were published first (a day's
    registrations, then its traffic), a capped read takes the same share of each topic,
    so an entry could be read before its plate's registration; the watermark, which the
    entries move, then passes it, and its alert is final without that registration. Read
    whole, every registration published before an entry is read no later than it."""
    return tuple(event_type for event_type, back in looked_back(settings).items() if back)


def looked_back(settings: Settings) -> dict[EventType, timedelta]:
    """Per event type, how long before the events they match the views look it up
    (``View.reaches``; 0 for one looked up only at or after them)."""
    reaches = reaches_of(REGISTERED, settings.views.sizes)
    return {
        event_type: -min((timedelta(0), *reaches.get(event_type.name, ())))
        for event_type in EVENT_TYPES
    }


def delay(watermark: timedelta) -> str:
    return f"{int(watermark.total_seconds())} seconds"


def watermarked(events: DataFrame, event_type: EventType, watermark: timedelta) -> DataFrame:
    """Declare the event-time column and how late its events may be."""
    return events.withWatermark(event_type.time_field, delay(watermark))


def with_event_time(events: DataFrame, event_type: EventType, watermark: timedelta) -> DataFrame:
    """Declare the event-time column and how late its events may be, then drop the
    duplicates of an event type a view counts (``shared.domain.views.rules.COUNTED_INPUTS``, as the
    batch layer does): a state store per partition is spent only where it changes a view."""
    events = watermarked(events, event_type, watermark)
    return events.transform(without_duplicates) if event_type.name in COUNTED_INPUTS else events


def _started(
    spark: SparkSession, writer: DataStreamWriter, available_now: bool, lane: tuple[timedelta, str]
) -> StreamingQuery:
    """Start a query in its lane: its trigger interval and its scheduler pool."""
    interval, pool = lane
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{interval.total_seconds()} seconds")
    # a query's jobs run in the pool of the thread that started it (a no-op
    # unless spark.scheduler.mode is FAIR)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    try:
        return writer.start()
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]


def input_starts(settings: Settings, replay_from: datetime | None) -> dict[str, datetime]:
    """Where a new checkpoint reads each input topic from, by record time: from
    ``replay_from``, and an event type the views look up before the entries they match
    that much earlier (``View.reaches``: registrations, the lookback before the
    entries). None: every offset."""
    if replay_from is None:
        return {}
    return {
        settings.topics.of(event_type): replay_from - back
        for event_type, back in looked_back(settings).items()
    }


def run(
    spark: SparkSession,
    settings: Settings,
    available_now: bool = False,
    replay_from: datetime | None = None,
) -> None:
    """Run the speed layer until stopped (SIGINT/SIGTERM/SIGHUP) or, with available_now, drained.

    ``replay_from``: a new checkpoint reads the input from then on (:func:`input_starts`; a
    new generation's, ``shared.platform.generations.replay_from``), else from the start.

    Raises ``speed_layer.checkpoint.CheckpointError`` before any query starts if the
    checkpoint keeps its state with another provider than the session's, in another
    layout, or for other operator views.
    """
    claim_state_store(
        checkpoint_dir(settings), spark.conf.get(STATE_STORE_PROVIDER_CONF) or "",
        [view.name for view in operator_views(REGISTERED)],
    )  # fmt: skip
    log_event(
        logger, "speed_start", master=spark.sparkContext.master,
        topics=settings.topics.inputs(), checkpoints=str(checkpoint_dir(settings)),
        available_now=available_now, generation=settings.generation,
        replay_from=replay_from.isoformat() if replay_from else None,
        trigger_s=settings.speed.trigger.total_seconds(),
        max_offsets_per_trigger=settings.speed.max_offsets_per_trigger,
        diagnostics_trigger_s=settings.speed.diagnostics_trigger.total_seconds(),
    )  # fmt: skip
    starts = input_starts(settings, replay_from)
    views = settings.views

    def raw(*event_types: EventType, capped: bool = True) -> DataFrame:
        wanted = {settings.topics.of(kind) for kind in event_types}
        chosen = {topic: at for topic, at in starts.items() if topic in wanted}
        return read_input_topics(spark, settings, event_types, chosen, capped)

    # the operator's query: every input record read and decoded once, then the views
    # of the roll-up and of the plates from one stateful operator (speed_layer.operator)
    fast = (settings.speed.trigger, VIEWS_POOL)
    others = (settings.speed.trigger, OTHERS_POOL)
    first_phase: list[tuple[DataStreamWriter, tuple[timedelta, str]]] = []
    if operator_views():
        whole = read_whole(settings)
        records = raw(*(event_type for event_type in EVENT_TYPES if event_type not in whole))
        if whole:
            records = records.unionByName(raw(*whole, capped=False))
        decoded = decode_together(
            records, settings.topics, views.max_future_skew, views.dead_letter_bytes
        )
        rows = operator_input(decoded, views.watermark, views.sizes)
        first_phase.append((views_writer(rows, settings), fast))
    # a view of its own: its function over the watermarked, deduplicated entries
    second_phase = []
    for view in REGISTERED:
        plan = view.speed
        if plan.lane is Lane.OWN_QUERY:
            entries = decode_records(
                raw(TOLL_ENTRY), settings.topics, views.max_future_skew, views.dead_letter_bytes,
                event_types=(TOLL_ENTRY,),
            ).of(TOLL_ENTRY)  # fmt: skip
            rows = view.compute(
                Inputs(with_event_time(entries, TOLL_ENTRY, views.watermark)), views.sizes
            )
            writer = view_writer(view.spec, rows, settings, output_mode=plan.output_mode)
            first_phase.append((writer, others))
        elif plan.lane is Lane.DERIVED:  # the operator's internal topic, not the input topics
            rows = diagnostic_counts(spark, settings)
            writer = view_writer(view.spec, rows, settings, plan.output_mode, derived=True)
            second_phase.append((writer, (settings.speed.diagnostics_trigger, OTHERS_POOL)))
    # continuous: everything at once; available-now: drain phase by phase
    phases = [first_phase, second_phase] if available_now else [first_phase + second_phase]
    started: list[StreamingQuery] = []

    def stopping(signum: int) -> None:
        log_event(logger, "speed_stopping", signal=signal.Signals(signum).name)

    # each micro-batch to the log and speed.progress; a signal only sets the
    # request: the main thread is inside a py4j call (awaitTermination), which
    # it must not leave half-way (shared.platform.streaming)
    with (
        contextlib.closing(
            ProgressPublisher(settings, late_rows_reported(settings), rows_counted(spark))
        ) as publisher,
        listening(spark, publisher),
        stop_requests(on_signal=stopping) as stop,
    ):
        try:
            for phase in phases:
                if stop.is_set():
                    break
                queries = [_started(spark, writer, available_now, lane) for writer, lane in phase]
                started += queries
                if not wait_for(queries, stop) or any(q.exception() is not None for q in queries):
                    break
        finally:
            for query in started:  # on a stop request, or when one query failed
                if query.isActive:
                    stop_query(query)
            # Spark's listener bus delivers them after the queries end
            publisher.wait_for_terminations(str(query.id) for query in started)
    raise_if_failed(started)
    log_event(logger, "speed_stopped")
