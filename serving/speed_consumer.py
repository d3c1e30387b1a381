"""Following the speed store: a kafka-python consumer per process feeding SpeedTables.

It reads every partition of the ``speed.<view>`` topics and ``speed.progress``
from the beginning (no consumer group: each API process materialises the whole
store), notes the end offsets it saw at start, and is *caught up* once it has
read up to them; ``/readyz`` waits for that.

A poll does not fail when the broker goes away: kafka-python reconnects in the
background and returns nothing. So every ``END_OFFSETS_EVERY_S`` the consumer
asks for the end offsets. That keeps the lag (records on the broker not read yet)
true after catching up, and an unanswered request is the sign that the broker
was lost: it becomes the consumer's error, and the next attempt resumes from the
positions read so far.

``lambdaline speed reset`` deletes the speed store's topics and creates them
again. A consumer left at its old positions would go on in the new topics at
the old offsets (kafka-python moves it to their end, skipping what the new job
has written), and would keep every old row whose micro-batch id is above the
new job's. So the consumer notes each topic's id (KIP-516: a topic created
again has a new one), asks for them with the end offsets, and on a new id
empties that view's table and reads the new topic from its start.

The consumer also notes which input offsets the rows it has applied reflect
(:class:`serving.consistency.InputProgress`), for the consistency token of
every answer: after reading speed-query progress reports it asks for the
store's end offsets (at most every ``INPUT_ENDS_EVERY_S``), and once it has read
up to them the reports' input offsets count.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaTimeoutError

from serving.consistency import InputProgress, Offsets
from serving.stream import StreamHub
from shared.platform.kafka_admin import (
    KafkaTopicsMissingError,
    TopicFacts,
    admin_client,
    describe_present,
    kafka_consumer,
)
from shared.platform.logs import log_event
from shared.platform.speed_reader import apply_polled
from shared.platform.speed_tables import ChangedRow, SpeedTables
from shared.settings import Settings
from shared.settings.views import VIEW_BY_NAME, VIEW_NAMES

logger = logging.getLogger("lambdaline.serving")

BOOTSTRAP_TIMEOUT_MS = 5_000
"""How long one attempt waits for a broker before it is logged as an error and retried.

kafka-python's default (30 s) left a server started without Kafka silent for
half a minute; the API serves batch answers meanwhile, and ``/readyz`` says why
it is not ready."""
RETRY_S = 2.0
END_OFFSETS_EVERY_S = 5.0
"""How often the end offsets are asked for: the lag's age, and how soon a lost broker shows."""
INPUT_ENDS_EVERY_S = 0.1
"""How often, at most, end offsets are asked for to settle the progress reports read."""
POLL_MS, POLL_RECORDS = 200, 5000
"""A poll's wait for records, and the most it takes."""
FETCH_WAIT_MS, FETCH_MIN_BYTES = 250, 1 << 20
"""The broker answers a fetch once it has this many bytes or has waited this long: under
load a poll then brings a quarter second of rows, applied in one upsert per view, rather
than a few records each (an upsert costs milliseconds whatever its size). A row reaches
the API at most this much later; a backlog is fetched at once."""
REJECTIONS_LOGGED = 20
"""Records skipped as not rows of their view that are logged one by one; the rest are counted."""


class BrokerLostError(Exception):
    """The cluster stopped answering a consumer that had reached it."""


class SpeedConsumer:
    """A background thread materialising the speed store into :class:`SpeedTables`."""

    def __init__(self, settings: Settings, tables: SpeedTables, hub: StreamHub | None = None):
        """``hub``: told the rows each poll changes (``GET /v1/stream``)."""
        self.settings = settings
        self.tables = tables
        self.views_by_topic = {settings.speed_topics.speed(view): view for view in VIEW_NAMES}
        self.progress_topic = settings.speed_topics.speed_progress
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ends: dict[TopicPartition, int] | None = None
        """The latest end offsets known: those seen at start until caught up."""
        self._positions: dict[TopicPartition, int] = {}
        self._topic_ids: dict[str, uuid.UUID | None] = {}
        """Each followed topic's id, as first seen (or seen again after it was created again)."""
        self.caught_up = threading.Event()
        self.records_read = 0
        self.error: str | None = None
        """Why the last attempt to follow the cluster failed, until one succeeds."""
        self.following = False
        """Connected and reading (the end offsets answered); False while retrying."""
        self.input_progress = InputProgress(settings.topics.inputs())
        self.hub = hub

    def start(self) -> None:
        log_event(
            logger, "speed_consumer_start", bootstrap=self.settings.kafka.bootstrap,
            topics=[*self.views_by_topic, self.progress_topic],
        )  # fmt: skip
        self._thread = threading.Thread(target=self._run, name="speed-consumer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def lag(self) -> int | None:
        """Records on the broker not read yet (None before connecting).

        Until caught up, counted against the end offsets seen at start; after
        that, against the latest asked for (at most ``END_OFFSETS_EVERY_S`` old).
        """
        if self._ends is None:
            return None
        return sum(
            max(0, end - self._positions.get(partition, 0)) for partition, end in self._ends.items()
        )

    def materialised(self) -> tuple[Offsets, Offsets]:
        """What this worker has applied: the next offset it reads of each partition of the
        ``speed.<view>`` topics, and the input offsets those rows reflect
        (:mod:`serving.consistency`)."""
        speed: dict[str, dict[int, int]] = {}
        for partition, position in list(self._positions.items()):
            if partition.topic in self.views_by_topic:
                speed.setdefault(partition.topic, {})[partition.partition] = position
        return speed, self.input_progress.offsets

    def _consumer(self) -> KafkaConsumer:
        return kafka_consumer(
            self.settings.kafka,
            client_id="lambdaline-serving",
            group_id=None,  # positions are the store's, not Kafka's: no commits
            # resuming at a position retention has since deleted: the earliest record kept
            auto_offset_reset="earliest",
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
            fetch_max_wait_ms=FETCH_WAIT_MS,
            fetch_min_bytes=FETCH_MIN_BYTES,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as error:  # keep serving, retry, and say why (once per cause)
                self.following = False
                text, name = str(error), type(error).__name__
                message = text if text.startswith(name) else f"{name}: {text}"
                if message != self.error:
                    log_event(logger, "speed_consumer_error", error=message, retry_s=RETRY_S)
                self.error = message
                self._stop.wait(RETRY_S)

    def _follow(self) -> None:
        """Follow the topics until stopped (returns early to start over on a recreated topic)."""
        topics = [*self.views_by_topic, self.progress_topic]
        consumer = self._consumer()
        admin = admin_client(
            self.settings.kafka, "lambdaline-serving", timeout_ms=BOOTSTRAP_TIMEOUT_MS
        )
        try:
            facts = self._described(admin, topics)
            self._start_over_recreated(facts)
            partitions = [
                TopicPartition(topic, number)
                for topic in topics
                for number in range(facts[topic].partitions)
            ]
            consumer.assign(partitions)
            if self.hub is not None:  # a resumed stream keeps only partitions these have
                self.hub.partitions = {
                    view: facts[topic].partitions for topic, view in self.views_by_topic.items()
                }
            for partition in partitions:  # after a lost connection, on from where it was
                if partition in self._positions:
                    consumer.seek(partition, self._positions[partition])
                else:
                    consumer.seek_to_beginning(partition)
            if self._ends is None:
                self._ends = self._end_offsets(consumer, partitions)
            if self.error is not None:
                log_event(logger, "speed_consumer_recovered", after=self.error)
                self.error = None
            self.following = True
            asked = ends_for_reports = time.monotonic()
            views = [p for p in partitions if p.topic != self.progress_topic]
            while not self._stop.is_set():
                if time.monotonic() - asked >= END_OFFSETS_EVERY_S:
                    ends = self._end_offsets(consumer, partitions)  # raises if the broker is lost
                    if self._recreated(self._described(admin, topics)):
                        return  # follow again at once, from the new topics' start
                    if self.caught_up.is_set():
                        self._note_positions(consumer, partitions)
                        self._ends = ends
                    asked = time.monotonic()
                batches = consumer.poll(timeout_ms=POLL_MS, max_records=POLL_RECORDS)
                # one upsert per topic and poll, whatever its partitions: a statement's
                # fixed cost (milliseconds) is most of what a few records cost
                by_topic: dict[str, list[ConsumerRecord]] = {}
                for partition in sorted(batches, key=lambda p: (p.topic, p.partition)):
                    by_topic.setdefault(partition.topic, []).extend(batches[partition])
                for records in by_topic.values():
                    reports = apply_polled(
                        self.tables, self.views_by_topic, records, self._rejected,
                        self._changed if self.hub is not None else None,
                    )  # fmt: skip
                    for report in reports:
                        self.input_progress.reported(
                            str(report["query"]), report.get("source_end_offsets")
                        )
                for partition, records in batches.items():
                    self._positions[partition] = records[-1].offset + 1
                    self.records_read += len(records)
                if not self.caught_up.is_set():
                    self._note_positions(consumer, partitions)
                if self.input_progress.has_reports:
                    if (
                        self.input_progress.awaiting_ends
                        and time.monotonic() - ends_for_reports >= INPUT_ENDS_EVERY_S
                    ):
                        self.input_progress.ends_asked(self._end_offsets(consumer, views))
                        ends_for_reports = time.monotonic()
                    self._note_positions(consumer, views)  # local: positions are known
                    self.input_progress.positions_reached(self._positions)
                if not self.caught_up.is_set() and self.lag == 0:
                    self.caught_up.set()
                    log_event(logger, "speed_store_caught_up", records=self.records_read)
        finally:
            admin.close()
            consumer.close()

    def _described(self, admin: KafkaAdminClient, topics: list[str]) -> dict[str, TopicFacts]:
        facts = describe_present(admin, topics)
        if missing := [topic for topic in topics if topic not in facts]:
            # followed as they were, the store would be "caught up" with nothing, for good;
            # deleted by a speed reset, they come back in a moment
            raise KafkaTopicsMissingError(self.settings.kafka.bootstrap, missing)
        return facts

    def _recreated(self, facts: dict[str, TopicFacts]) -> list[str]:
        """The followed topics whose id is not the one noted: deleted and created again."""
        return [
            topic
            for topic, noted in self._topic_ids.items()
            if noted is not None and facts[topic].topic_id != noted
        ]

    def _start_over_recreated(self, facts: dict[str, TopicFacts]) -> None:
        """Forget what was read of each recreated topic (its rows, its positions) and note
        every topic's id."""
        if recreated := self._recreated(facts):
            cleared = {}
            for topic in recreated:
                if topic == self.progress_topic:
                    self.tables.forget_progress()
                else:
                    view = self.views_by_topic[topic]
                    cleared[view] = self.tables.clear(view)
                    if self.hub is not None:
                        self.hub.restarted(view)
                for partition in [p for p in self._positions if p.topic == topic]:
                    del self._positions[partition]
            self._ends = None  # those seen at start were the old topics'
            self.input_progress.forget()
            log_event(
                logger, "speed_topics_recreated", topics=recreated, rows_cleared=cleared,
                then="reading them from the start",
            )  # fmt: skip
        self._topic_ids = {topic: fact.topic_id for topic, fact in facts.items()}

    def _note_positions(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        """The consumer's own positions: a partition whose records retention deleted (or
        compaction thinned) starts at, or skips to, a later offset than the last record read."""
        for partition in partitions:
            # bounded: kafka-python waits without end for a position it must ask the broker for
            position = consumer.position(partition, timeout_ms=BOOTSTRAP_TIMEOUT_MS)
            if position is not None:
                self._positions[partition] = max(self._positions.get(partition, 0), position)

    def _end_offsets(
        self, consumer: KafkaConsumer, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        try:
            return dict(consumer.end_offsets(partitions, timeout_ms=BOOTSTRAP_TIMEOUT_MS))
        except KafkaTimeoutError:
            raise BrokerLostError(
                f"Kafka at {self.settings.kafka.bootstrap} stopped answering (no end offsets in "
                f"{BOOTSTRAP_TIMEOUT_MS / 1000:g} s); serving the speed rows read so far"
            ) from None

    def _changed(self, view: str, records: list[ConsumerRecord], rows: list[ChangedRow]) -> None:
        """The rows a poll changed, to the stream's clients, final as the watermark says now."""
        assert self.hub is not None
        final_before = self.tables.final_before(VIEW_BY_NAME[view], self.tables.watermark)
        self.hub.rows(view, records, rows, final_before)

    def _rejected(self, record: ConsumerRecord, why: str) -> None:
        """A record skipped as not a row of its view: counted, and the first ones logged."""
        if self.tables.rejected > REJECTIONS_LOGGED:
            return
        last = {"then": "counted only"} if self.tables.rejected == REJECTIONS_LOGGED else {}
        log_event(
            logger, "speed_record_rejected", topic=record.topic, partition=record.partition,
            offset=record.offset, reason=why, **last,
        )  # fmt: skip

    def wait_caught_up(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return self.caught_up.wait(max(0.0, deadline - time.monotonic()))
