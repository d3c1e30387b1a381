"""The generations a worker serves: the active one, and the next one, materialised ahead.

Each generation of the views (``shared.platform.generations``) has its own batch store,
speed topics and view settings, so a worker holds each as a :class:`Served`: its own
:class:`BatchReader`, speed tables and consumer, and stream hub. :class:`Generations`
reads ``ACTIVE`` and the generations' records every second, materialises the served
generation and the newest other live one (the next, or the previous after a
promotion, for a rollback), and switches to the one ``ACTIVE`` names once this worker
has caught up with its speed store. A request takes the active generation once, when it
starts (``serving.deps.served``), so no answer holds rows of two generations; an open
stream is told ``generation`` and goes on from the new generation's rows
(``serving.routers.stream``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from serving.batch_reader import BatchReader
from serving.models import GenerationStatus
from serving.speed_consumer import SpeedConsumer
from serving.stream import StreamHub
from shared.platform.batch_store import read_current
from shared.platform.generations import (
    Generation,
    GenerationError,
    JobFacts,
    aware_utc,
    input_lag,
    live,
    read_active,
    read_generations,
    settings_of,
    waiting_for,
)
from shared.platform.kafka_admin import KafkaNotReadyError, offset_bounds
from shared.platform.logs import log_event
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings

logger = logging.getLogger("lambdaline.serving")

POLL_S = 1.0
"""How often ``ACTIVE`` and the generations' records are read."""
INPUT_ENDS_S = 5.0
"""How old the input topics' end offsets ``/v1/status`` measures lags against may be."""


@dataclass
class Served:
    """One generation's stores in this worker."""

    number: int
    settings: Settings
    reader: BatchReader
    tables: SpeedTables
    consumer: SpeedConsumer | None
    hub: StreamHub
    record: Generation | None = None
    """None: generation 1 of a deployment that never recorded one."""

    @property
    def fingerprint(self) -> str | None:
        return self.record.fingerprint if self.record is not None else None

    @property
    def caught_up(self) -> bool:
        return self.consumer is None or self.consumer.caught_up.is_set()

    def start(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.reader.start()
        if loop is not None:
            self.hub.start(loop)
        if self.consumer is not None:
            self.consumer.start()

    def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.stop()
        self.reader.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "generation": self.number,
            "fingerprint": self.fingerprint,
            "view_settings": self.settings.views.labels,
            "caught_up": self.caught_up,
        }


def served_stores(
    settings: Settings,
    record: Generation | None,
    follow_kafka: bool,
    reader: BatchReader | None = None,
    tables: SpeedTables | None = None,
) -> Served:
    """A generation's stores as a worker holds them (not started); ``reader`` and
    ``tables``: given instead of those of ``settings`` (a test's)."""
    threads = settings.serving.duckdb_threads
    tables = tables or SpeedTables(threads, settings.views)
    reader = reader or BatchReader(
        settings.batch_store, cache_bytes=settings.serving.cache_mb * 2**20, threads=threads
    )
    serving = settings.serving
    hub = StreamHub(serving.stream_buffer, serving.stream_queue, settings.generation)
    consumer = SpeedConsumer(settings, tables, hub) if follow_kafka else None
    return Served(settings.generation, settings, reader, tables, consumer, hub, record)


class Generations:
    """The generations this worker serves: :attr:`active`, and the others it materialises."""

    def __init__(self, base: Settings, follow_kafka: bool, fixed: Served | None = None):
        """``fixed``: serve these stores only and follow no ``ACTIVE`` (a test's)."""
        self.base = base
        self.follow_kafka = follow_kafka
        self.fixed = fixed is not None
        self.others: dict[int, Served] = {}
        self.records: dict[int, Generation] = {}
        """The generations recorded, as last read."""
        self.input_ends: dict[tuple[str, int], int] | None = None
        """The input topics' end offsets, at most :data:`INPUT_ENDS_S` old (None: not known)."""
        self.error: str | None = None
        """Why a generation cannot be served or materialised, until it can."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.active: Served = fixed if fixed is not None else self._first()
        self._on_drop: Callable[[], None] = lambda: None

    @property
    def on_drop(self) -> Callable[[], None]:
        """Told each time a stream hub of any generation drops a slow client (a metric)."""
        return self._on_drop

    @on_drop.setter
    def on_drop(self, told: Callable[[], None]) -> None:
        self._on_drop = told
        for served in self.all:
            served.hub.on_drop = told

    def _first(self) -> Served:
        """The generation ``ACTIVE`` names, or generation 1 if it cannot be read."""
        root = self.base.batch_store_root
        try:
            number = read_active(root).generation
            self.records = read_generations(root)
            return self._build(number, self.records)
        except GenerationError as error:
            self.error = str(error)
            log_event(logger, "generation_unreadable", error=str(error))
            return served_stores(self.base.updated(generation=1), None, self.follow_kafka)

    def _build(self, number: int, records: dict[int, Generation]) -> Served:
        record = records.get(number)
        if record is None:
            if number != 1:
                raise GenerationError(f"ACTIVE names generation {number}, which has no record")
            return served_stores(self.base.updated(generation=1), None, self.follow_kafka)
        return served_stores(settings_of(self.base, record), record, self.follow_kafka)

    @property
    def all(self) -> list[Served]:
        return [self.active, *self.others.values()]

    def start(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self.active.start(loop)

    def stop(self) -> None:
        for served in self.all:
            served.stop()

    async def follow(self) -> None:
        """Run with the app: every :data:`POLL_S`, materialise and switch as ``ACTIVE``
        and the records say."""
        if self.fixed:
            return
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await run_in_threadpool(self.poll)
            except Exception as error:  # keep serving what is served; say why
                self._failed(f"{type(error).__name__}: {error}")

    def _failed(self, message: str) -> None:
        if message != self.error:
            log_event(logger, "generation_follow_failed", error=message)
        self.error = message

    def poll(self) -> None:
        """Read ``ACTIVE`` and the records; start the stores of a generation to serve or to
        materialise ahead, switch once the active one's are caught up, stop the rest."""
        root = self.base.batch_store_root
        try:
            wanted = read_active(root).generation
            records = read_generations(root)
        except GenerationError as error:
            self._failed(str(error))
            return
        self.records = records
        others = [g.number for g in live(records) if g.number != wanted]
        keep = {wanted, *others[-1:]}
        errors = []
        for number in sorted(keep - {self.active.number} - set(self.others)):
            try:
                served = self._build(number, records)
            except GenerationError as error:
                errors.append(f"generation {number} cannot be served here: {error}")
                continue
            served.hub.on_drop = self._on_drop
            served.start(self._loop)
            self.others[number] = served
            log_event(logger, "generation_materialising", generation=number)
        if wanted != self.active.number and wanted in self.others:
            target = self.others[wanted]
            if target.caught_up:
                self._switch(target)
            else:
                errors.append(
                    f"generation {wanted} is served once this worker has read its speed store"
                )
        for number in [n for n in self.others if n not in keep]:
            self.others.pop(number).stop()
            log_event(logger, "generation_released", generation=number)
        self.error = "; ".join(errors) or None

    async def follow_input_ends(self) -> None:
        """Run with the app: while a second generation lives, ask for the input topics'
        end offsets every :data:`INPUT_ENDS_S` (what ``/v1/status`` measures each
        generation's lag against), away from the requests: a lost broker takes
        ``kafka_timeout`` to answer."""
        if self.fixed or not self.follow_kafka:
            return
        while True:
            if len(live(self.records)) > 1:
                try:
                    bounds = await run_in_threadpool(
                        offset_bounds, self.base.kafka, self.base.topics.inputs()
                    )
                except KafkaNotReadyError:
                    self.input_ends = None
                else:
                    self.input_ends = {where: int(bound.end) for where, bound in bounds.items()}
            await asyncio.sleep(INPUT_ENDS_S)

    def statuses(self) -> list[GenerationStatus]:
        """Each live generation as this worker sees it, and whether it may be promoted
        (``shared.platform.generations.waiting_for``, from its materialised stores)."""
        held = {served.number: served for served in self.all}
        records: list[Generation | None] = [*live(self.records)] or [None]
        ends = self.input_ends
        served_watermark = aware_utc(self.active.tables.watermark)
        found = []
        for record in records:
            number = record.number if record is not None else self.active.number
            stores = held.get(number)
            if stores is not None:
                batch = stores.reader.version
                watermark = aware_utc(stores.tables.watermark)
                lag = input_lag(stores.tables.reports, ends) if ends is not None else None
                job = JobFacts(watermark, lag)
            else:
                settings = self.base.updated(generation=number)
                batch = read_current(settings.batch_store)
                job = JobFacts(None, None, error="this worker does not materialise it")
            served = number == self.active.number
            waiting = (
                []
                if served or record is None
                else waiting_for(record, batch, job, served_watermark, self.base.speed)
            )
            found.append(
                GenerationStatus(
                    generation=number,
                    fingerprint=record.fingerprint if record is not None else None,
                    view_settings=dict(record.view_settings)
                    if record is not None
                    else self.active.settings.views.labels,
                    served=served,
                    materialised=stores is not None,
                    caught_up=stores is not None and stores.caught_up,
                    batch_version=batch.version if batch else None,
                    batch_horizon=batch.horizon if batch else None,
                    speed_watermark=job.watermark,
                    speed_lag_records=job.lag,
                    ready=not served and record is not None and not waiting,
                    waiting_for=waiting,
                )
            )
        return found

    def _switch(self, target: Served) -> None:
        old = self.active
        self.others.pop(target.number)
        self.others[old.number] = old
        self.active = target  # one assignment: a request takes one or the other
        log_event(logger, "generation_switched", old=old.number, new=target.number)
