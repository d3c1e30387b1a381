"""A seeded, realistic toll-booth event stream, sent to Kafka or written to a file.

The model
---------
Vehicles (``plates``) arrive at ``booths`` as a Poisson process of ``traffic``
entries per simulated second, starting at ``start``. Each entry implies:

* an exit at the same booth after a log-normal trip (median ``trip_median``,
  default 12 min, capped below the ``max_trip`` setting), unless the entry is one
  of the ``missing_exit`` fraction;
* a registration of its plate recorded 1-30 days before ``start`` (sent first),
  expired for the ``expired`` fraction of plates and absent for the
  ``unregistered`` fraction.

Every record is sent at its event time plus a small network delay, except the
``late`` fraction, which is sent ``lateness`` later (exponential with mean
``late_mean``). The Kafka record timestamp is that simulated send time. On top,
the ``duplicate`` fraction of records is sent again (same bytes, same event_id)
within 30 s, and a ``malformed`` fraction of extra records breaks one validation
rule each, cycling through every dead-letter reason.

Determinism and parallelism
---------------------------
The stream is cut into one shard per partition: a plate's records all go to the
partition its key hashes to (Kafka's murmur2, so Java clients agree), and each
shard is simulated with its own RNG seeded by (seed, start, shard). The same
arguments give the same bytes on every partition, however many worker processes
send them. Workers each own a set of shards, send with kafka-python (lz4,
batching, linger) and explicit partitions.

Every record carries a ``lambdaline.kind`` header (``entry``, ``exit``,
``registration``, ``duplicate`` or ``malformed:<reason>``): ground truth for
tests and the benchmark; the layers ignore it.
"""

from __future__ import annotations

import heapq
import json
import math
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from kafka.partitioner.default import murmur2

from shared.domain.events import (
    BoothId,
    EventId,
    LicensePlate,
    RegistrationId,
    Toll,
    TollEntry,
    TollExit,
    VehicleRegistration,
    encode_event,
    event_to_wire,
    format_instant,
)
from shared.domain.validation import DeadLetterReason
from shared.platform.kafka_admin import kafka_producer, require_kafka
from shared.settings import Settings

KIND_HEADER = "lambdaline.kind"
_STATES = ("NY", "NJ", "CT", "PA", "MA", "VT", "ON", "QC")
_MAKES = {
    "Toyota": ("Corolla", "RAV4", "Camry"),
    "Ford": ("F-150", "Focus", "Transit"),
    "Volvo": ("XC60", "FH16"),
    "Škoda": ("Octavia", "Superb"),
    "Tesla": ("Model 3", "Model Y"),
}
_MAKE_NAMES = tuple(_MAKES)
_PLATE_LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"
_UNICODE_PLATE_LETTERS = "ÄÖÜÅØÆŁŽ"
_MALFORMED_CLASSES = (
    DeadLetterReason.INVALID_JSON,
    DeadLetterReason.MISSING_FIELD,
    DeadLetterReason.INVALID_VALUE,
    DeadLetterReason.FUTURE_EVENT_TIME,
)


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate. Fractions are of entries (malformed, duplicate: of records)."""

    events: int
    seed: int = 42
    start: datetime = field(default_factory=lambda: datetime(2026, 1, 5, 6, tzinfo=UTC))
    traffic: float = 20.0
    rate: float = 0.0
    speedup: float = 0.0
    booths: int = 10
    plates: int = 5000
    late: float = 0.02
    late_mean: timedelta = timedelta(minutes=3)
    duplicate: float = 0.01
    malformed: float = 0.01
    expired: float = 0.05
    unregistered: float = 0.01
    missing_exit: float = 0.02
    trip_median: timedelta = timedelta(minutes=12)
    """Median trip (entry to exit). A short one makes exits flow within seconds
    of their entries, as a real-time benchmark of a few minutes needs."""
    duration: timedelta | None = None
    """Stop at start + duration of simulated time: records due later (exits of late
    trips, delayed duplicates) are not sent. None: send everything."""

    def __post_init__(self) -> None:
        if self.events < 0:
            raise ValueError("events must be >= 0")
        if self.start.tzinfo is None:
            raise ValueError("start must carry a time zone (e.g. 2026-01-05T06:00:00Z)")
        for name in ("traffic",):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.trip_median <= timedelta(0):
            raise ValueError("trip_median must be > 0")
        for name in ("rate", "speedup"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = as fast as possible)")
        for name in ("booths", "plates"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("late", "duplicate", "malformed", "expired", "unregistered", "missing_exit"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} is a fraction and must lie in [0, 1]")


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """One Kafka record; ``timestamp_ms`` is its simulated send time."""

    timestamp_ms: int
    topic: str
    partition: int
    key: bytes
    value: bytes
    kind: str


_Pending = tuple[int, int, int, OutgoingRecord]
"""(send time, creation order, shard, record): compared as plain tuples, in C, on the hot path;
the shard makes the tuples of different shards distinct before the record is reached."""


@dataclass
class GeneratorSummary:
    """Counts by kind and topic; records/s measured over the sending."""

    by_kind: Counter[str] = field(default_factory=Counter)
    by_topic: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    first_timestamp_ms: int | None = None
    last_timestamp_ms: int | None = None
    unacknowledged: int = 0
    """Records Kafka did not acknowledge (after the producer's retries)."""
    first_error: str | None = None

    @property
    def records(self) -> int:
        return sum(self.by_kind.values())

    def add(self, other: GeneratorSummary) -> None:
        self.by_kind.update(other.by_kind)
        self.by_topic.update(other.by_topic)
        self.unacknowledged += other.unacknowledged
        self.first_error = self.first_error or other.first_error
        for attr, pick in (("first_timestamp_ms", min), ("last_timestamp_ms", max)):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            values = [v for v in (mine, theirs) if v is not None]
            setattr(self, attr, pick(values) if values else None)

    def count(self, record: OutgoingRecord) -> None:
        self.by_kind[record.kind] += 1
        self.by_topic[record.topic] += 1
        if self.first_timestamp_ms is None or record.timestamp_ms < self.first_timestamp_ms:
            self.first_timestamp_ms = record.timestamp_ms
        if self.last_timestamp_ms is None or record.timestamp_ms > self.last_timestamp_ms:
            self.last_timestamp_ms = record.timestamp_ms


def partition_of(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2, positive, modulo), as Java clients compute it."""
    return (int(murmur2(key)) & 0x7FFFFFFF) % partitions


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _plate(rng: random.Random) -> str:
    letters = _PLATE_LETTERS if rng.random() > 0.02 else _UNICODE_PLATE_LETTERS
    return "".join(rng.choice(letters) for _ in range(3)) + f"-{rng.randrange(10000):04d}"


def plate_pool(config: GeneratorConfig) -> list[str]:
    """All plates of the run, the same for every shard (seeded by seed only)."""
    rng = random.Random(f"plates:{config.seed}")
    plates: dict[str, None] = {}
    while len(plates) < config.plates:
        plates[_plate(rng)] = None
    return list(plates)


class _Shard:
    """The simulation of one partition's plates; yields records in send-time order."""

    def __init__(self, config: GeneratorConfig, settings: Settings, shard: int, shards: int):
        self.config = config
        self.topics = settings.topics
        self.max_trip = settings.views.sizes["max_trip"]
        self.max_future_skew = settings.views.max_future_skew
        self.shard = shard
        self.shards = shards
        self.rng = random.Random(f"{config.seed}:{config.start.isoformat()}:{shard}")
        self.plates = [
            plate for plate in plate_pool(config) if partition_of(plate.encode(), shards) == shard
        ]
        base, extra = divmod(config.events, shards)
        self.entries = base + (1 if shard < extra else 0)
        self.sequence = 0
        self.pending: list[_Pending] = []
        self.start_ms = _ms(config.start)

    # --- helpers -----------------------------------------------------------
    def _event_id(self) -> EventId:
        return EventId(f"{self.rng.getrandbits(64):016x}")

    def _delay_ms(self) -> int:
        if self.rng.random() < self.config.late:
            return int(self.rng.expovariate(1.0 / self.config.late_mean.total_seconds()) * 1000)
        return int(self.rng.expovariate(1 / 0.1) * 1000)  # network delay, mean 100 ms

    def _push(self, sent_ms: int, topic: str, key: bytes, value: bytes, kind: str) -> None:
        self._enqueue(OutgoingRecord(sent_ms, topic, self.shard, key, value, kind))
        if self.rng.random() < self.config.duplicate:
            again = sent_ms + self.rng.randrange(1, 30_000)
            self._enqueue(OutgoingRecord(again, topic, self.shard, key, value, "duplicate"))

    def _enqueue(self, record: OutgoingRecord) -> None:
        self.sequence += 1
        heapq.heappush(self.pending, (record.timestamp_ms, self.sequence, self.shard, record))

    # --- the simulation ---------------------------------------------------------
    def registrations(self) -> None:
        for plate in self.plates:
            if self.rng.random() < self.config.unregistered:
                continue
            recorded = self.config.start - timedelta(seconds=self.rng.uniform(86400, 30 * 86400))
            registration = VehicleRegistration(
                event_id=self._event_id(),
                registration_id=RegistrationId(f"R{self.rng.getrandbits(40):010x}"),
                license_plate=LicensePlate(plate),
                expired=self.rng.random() < self.config.expired,
                registration_time=recorded,
            )
            sent = _ms(recorded) + self._delay_ms()
            self._push(
                sent, self.topics.registrations, plate.encode(), encode_event(registration),
                "registration",
            )  # fmt: skip

    def entry(self, entry_time: datetime) -> None:
        rng = self.rng
        plate = rng.choice(self.plates)
        make = rng.choice(_MAKE_NAMES)
        booth = BoothId(f"booth-{rng.randrange(self.config.booths) + 1:02d}")
        entry = TollEntry(
            event_id=self._event_id(),
            booth_id=booth,
            entry_time=entry_time,
            license_plate=LicensePlate(plate),
            state=rng.choice(_STATES),
            make=make,
            model=rng.choice(_MAKES[make]),
            vehicle_type=rng.choice((1, 1, 1, 2, 3)),
            weight_kg=round(rng.uniform(900, 4000), 1),
            toll=Toll(Decimal(rng.choice(("2.50", "4.00", "5.75", "7.25", "12.00")))),
            tag=f"TAG{rng.getrandbits(32):08X}" if rng.random() < 0.7 else "",
        )
        key = plate.encode()
        self._push(
            _ms(entry_time) + self._delay_ms(), self.topics.entries, key, encode_event(entry),
            "entry",
        )  # fmt: skip
        if rng.random() >= self.config.missing_exit:
            trip = min(
                rng.lognormvariate(math.log(self.config.trip_median.total_seconds()), 0.5),
                self.max_trip.total_seconds() - 1,
            )
            exit_time = entry_time + timedelta(seconds=trip)
            exit_event = TollExit(self._event_id(), booth, exit_time, LicensePlate(plate))
            self._push(
                _ms(exit_time) + self._delay_ms(), self.topics.exits, key,
                encode_event(exit_event), "exit",
            )  # fmt: skip
        if rng.random() < self.config.malformed:
            self.malformed(entry, key)

    def malformed(self, entry: TollEntry, key: bytes) -> None:
        """An extra record breaking one rule; classes cycle so every reason appears."""
        reason = _MALFORMED_CLASSES[self.rng.randrange(len(_MALFORMED_CLASSES))]
        wire = event_to_wire(entry) | {"event_id": self._event_id()}
        sent = _ms(entry.entry_time) + self._delay_ms()
        value: bytes
        if reason is DeadLetterReason.INVALID_JSON:
            choice = self.rng.randrange(3)
            encoded = json.dumps(wire, ensure_ascii=False).encode()
            value = [encoded[: len(encoded) // 2], b"\xff\xfe" + encoded, b"not json"][choice]
        elif reason is DeadLetterReason.MISSING_FIELD:
            dropped = self.rng.choice(list(wire))
            if self.rng.random() < 0.5:
                del wire[dropped]
            else:
                wire[dropped] = None
            value = json.dumps(wire, ensure_ascii=False).encode()
        elif reason is DeadLetterReason.INVALID_VALUE:
            breakage = self.rng.randrange(4)
            if breakage == 0:
                wire["vehicle_type"] = str(wire["vehicle_type"])
            elif breakage == 1:
                wire["booth_id"] = ""
            elif breakage == 2:
                wire["toll"] = 1.234
            else:
                wire["entry_time"] = "yesterday"
            value = json.dumps(wire, ensure_ascii=False).encode()
        else:
            skew = self.max_future_skew + timedelta(minutes=self.rng.randrange(1, 600))
            ahead = datetime.fromtimestamp(sent / 1000, UTC) + skew
            wire["entry_time"] = format_instant(ahead)
            value = json.dumps(wire, ensure_ascii=False).encode()
        self._enqueue(
            OutgoingRecord(
                sent, self.topics.entries, self.shard, key, value, f"malformed:{reason.value}"
            )
        )

    def records(self) -> Iterator[_Pending]:
        if not self.plates:
            return
        self.registrations()
        mean_gap_ms = 1000.0 * self.shards / self.config.traffic  # shards share the traffic
        now_ms = float(self.start_ms)
        for _ in range(self.entries):
            now_ms += self.rng.expovariate(1.0 / mean_gap_ms)
            entry_ms = int(now_ms)
            while self.pending and self.pending[0][0] <= entry_ms:
                yield heapq.heappop(self.pending)
            self.entry(datetime.fromtimestamp(entry_ms / 1000, UTC))
        while self.pending:
            yield heapq.heappop(self.pending)


def shard_records(
    config: GeneratorConfig, settings: Settings, shards: list[int]
) -> Iterator[OutgoingRecord]:
    """The records of the given shards, merged in send-time order."""
    streams = [
        _Shard(config, settings, shard, settings.kafka.partitions).records() for shard in shards
    ]
    stop_ms = None if config.duration is None else _ms(config.start + config.duration)
    for *_, record in heapq.merge(*streams):
        if stop_ms is not None and record.timestamp_ms > stop_ms:
            return
        yield record


class _Pacer:
    """Holds sending back to the rate cap and to simulated time at the speedup."""

    def __init__(self, config: GeneratorConfig, share: float, wall_start: float):
        self.rate = config.rate * share
        self.speedup = config.speedup
        self.start_ms = _ms(config.start)
        self.wall_start = wall_start
        self.sent = 0

    def wait(self, record: OutgoingRecord) -> None:
        self.sent += 1
        if self.rate <= 0 and self.speedup <= 0:
            return
        due = 0.0
        if self.rate > 0:
            due = self.sent / self.rate
        if self.speedup > 0:
            due = max(due, (record.timestamp_ms - self.start_ms) / 1000.0 / self.speedup)
        delay = self.wall_start + due - time.monotonic()
        if delay > 0.002:
            time.sleep(delay)


PRODUCER_CONFIG: dict[str, Any] = {
    "compression_type": "lz4",
    "linger_ms": 250,
    "batch_size": 512 * 1024,
    "max_request_size": 8 * 1024 * 1024,
}
"""Throughput settings for kafka-python: big lz4 batches, a short linger."""


def _send_shards(
    config: GeneratorConfig,
    settings: Settings,
    shards: list[int],
    wall_start: float,
    progress: Callable[[int], None],
) -> GeneratorSummary:
    summary = GeneratorSummary()
    producer = kafka_producer(settings.kafka, "lambdaline-generator", **PRODUCER_CONFIG)
    pacer = _Pacer(config, len(shards) / settings.kafka.partitions, wall_start)
    headers: dict[str, list[tuple[str, bytes]]] = {}
    unreported = 0

    def not_acknowledged(error: BaseException) -> None:  # on the producer's I/O thread
        summary.unacknowledged += 1
        summary.first_error = summary.first_error or f"{type(error).__name__}: {error}"

    try:
        for record in shard_records(config, settings, shards):
            pacer.wait(record)
            kind_header = headers.get(record.kind)
            if kind_header is None:
                kind_header = headers[record.kind] = [(KIND_HEADER, record.kind.encode())]
            producer.send(
                record.topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                timestamp_ms=record.timestamp_ms,
                headers=kind_header,
            ).add_errback(not_acknowledged)
            summary.count(record)
            unreported += 1
            if unreported >= 5000:
                progress(unreported)
                unreported = 0
        producer.flush()
    finally:
        producer.close()
    progress(unreported)
    return summary


def _worker(
    config: GeneratorConfig,
    settings: Settings,
    shards: list[int],
    wall_start: float,
    counter: Any,
    results: Any,
) -> None:
    def progress(sent: int) -> None:
        with counter.get_lock():
            counter.value += sent

    summary = _send_shards(config, settings, shards, wall_start, progress)
    results.put(
        {
            "by_kind": dict(summary.by_kind),
            "by_topic": dict(summary.by_topic),
            "first_timestamp_ms": summary.first_timestamp_ms,
            "last_timestamp_ms": summary.last_timestamp_ms,
            "unacknowledged": summary.unacknowledged,
            "first_error": summary.first_error,
        }
    )


def send_to_kafka(
    config: GeneratorConfig,
    settings: Settings,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> GeneratorSummary:
    """Send the stream with one producer process per worker; return the summary."""
    # fail fast: kafka-python would wait a minute for a missing topic in each worker,
    # and fail on a partition the topic does not have
    require_kafka(settings.kafka, settings.topics.inputs(), settings.kafka.partitions)
    shards = list(range(settings.kafka.partitions))
    workers = max(1, min(workers or multiprocessing.cpu_count(), len(shards)))
    assignment = [shards[w::workers] for w in range(workers)]
    context = multiprocessing.get_context("spawn")
    counter = context.Value("q", 0)
    results = context.Queue()
    began = time.monotonic()
    wall_start = time.monotonic() + 1.0  # time for the workers to start, so pacing is fair
    processes = [
        context.Process(
            target=_worker,
            # pickled whole: its JSON would hide the SASL password (a SecretStr)
            args=(config, settings, mine, wall_start, counter, results),
            name=f"lambdaline-generator-{index}",
        )
        for index, mine in enumerate(assignment)
    ]
    for process in processes:
        process.start()
    summary = GeneratorSummary()
    received = 0
    reported = 0
    try:
        while received < len(processes):
            try:
                summary.add(_summary_from(results.get(timeout=0.2)))
                received += 1
            except Exception:  # queue.Empty: report progress and check the workers
                if any(p.exitcode not in (None, 0) for p in processes):
                    failed = [p.name for p in processes if p.exitcode not in (None, 0)]
                    raise RuntimeError(f"generator worker failed: {', '.join(failed)}") from None
            if on_progress is not None and counter.value != reported:
                on_progress(counter.value - reported)
                reported = counter.value
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
    if on_progress is not None and counter.value != reported:
        on_progress(counter.value - reported)
    summary.seconds = time.monotonic() - began
    if summary.unacknowledged:
        raise NotAcknowledgedError(
            f"Kafka did not acknowledge {summary.unacknowledged:,} of {summary.records:,} "
            f"records (the first: {summary.first_error}); the others were written"
        )
    return summary


class NotAcknowledgedError(RuntimeError):
    """Some records were not acknowledged by every in-sync replica; the message says how
    many and why."""


def _summary_from(raw: dict[str, Any]) -> GeneratorSummary:
    return GeneratorSummary(
        by_kind=Counter(raw["by_kind"]),
        by_topic=Counter(raw["by_topic"]),
        first_timestamp_ms=raw["first_timestamp_ms"],
        last_timestamp_ms=raw["last_timestamp_ms"],
        unacknowledged=raw["unacknowledged"],
        first_error=raw["first_error"],
    )


def write_json_lines(
    config: GeneratorConfig,
    settings: Settings,
    out: Path,
    on_progress: Callable[[int], None] | None = None,
) -> GeneratorSummary:
    """Write the same stream to a JSON-lines file instead of Kafka, in send-time order.

    Each line: topic, partition, key, timestamp (ms), kind, and the value as
    text (``value``) or, when it is not UTF-8, as base64 (``value_base64``).
    """
    import base64

    summary = GeneratorSummary()
    began = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    shards = list(range(settings.kafka.partitions))
    with out.open("w", encoding="utf-8") as sink:
        for record in shard_records(config, settings, shards):
            line: dict[str, Any] = {
                "topic": record.topic,
                "partition": record.partition,
                "key": record.key.decode(),
                "timestamp": record.timestamp_ms,
                "kind": record.kind,
            }
            try:
                line["value"] = record.value.decode()
            except UnicodeDecodeError:
                line["value_base64"] = base64.b64encode(record.value).decode()
            sink.write(json.dumps(line, ensure_ascii=False) + "\n")
            summary.count(record)
            if on_progress is not None and summary.records % 5000 == 0:
                on_progress(5000)
    summary.seconds = time.monotonic() - began
    return summary
