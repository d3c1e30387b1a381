"""What an answer is consistent with: a token a client can read and hand back.

Every ``/v1`` view answer carries ``consistency``, a :class:`ConsistencyToken`:
the batch version and horizon it was merged at, and what this worker had
materialised of the speed store when it read the rows. The token is
base64url (no padding) of a JSON object, version 1::

    {"v": 1, "generation": 2,
     "batch_version": 7, "horizon": "2026-01-06T00:00:00.000Z",
     "speed": {"speed.booth_stats": {"0": 1204, "1": 998}, ...},
     "input": {"toll.entries": {"0": 5120, "1": 4873}, ...}}

- ``generation``: the generation of the views served (``shared.platform.generations``):
  the batch version and the speed topics are that generation's, and the input offsets
  its speed job's. A token of another generation (one served before a promotion or a
  rollback) orders against nothing of this one: ``after=`` it is answered at once,
  under the generation served, saying which the token was of (``after_generation``).
- ``speed``: per partition of the ``speed.<view>`` topics, the next offset this
  worker reads: every record before it is applied to its tables.
- ``input``: per partition of the input topics, the offset up to which
  (exclusive) the speed layer has processed the input *and* this worker has
  applied everything that processing wrote. An event at offset ``o`` is
  materialised once its partition's value passes ``o``: every row the speed
  layer has made of it so far is served (a row that waits for the watermark,
  a missing exit or a visit's end, comes later as it would).

Offsets use Spark's Kafka offset form (``{"topic": {"partition": offset}}``).
Every field but ``v`` may be left out: a client that produced a record at
offset ``o`` of partition ``p`` of ``toll.entries`` asks
``after=`` the token of ``{"v": 1, "input": {"toll.entries": {"p": o + 1}}}``
to read its own write, from any worker.

A request that passes ``after=<token>`` waits (at most ``serving_after_wait``)
until this worker has materialised at least what the token names: the batch
version, every speed and input offset. Tokens order pointwise, so passing each
answer's token to the next request reads monotonically across workers.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.events import format_instant, parse_instant

TOKEN_FORMAT = 1

Offsets = Mapping[str, Mapping[int, int]]
"""Per topic, per partition, an offset."""


class BadTokenError(ValueError):
    """Text that is not a consistency token; the message says what is wrong."""


PARTITION = re.compile(r"[0-9]{1,9}")
"""A partition number as a token writes it: ASCII digits (``str.isdigit`` also takes
"²"), short enough to be a partition."""

MAX_OFFSET = 2**63 - 1
"""Kafka's offsets are 64-bit signed."""


def _offsets(document: object, name: str, room: list[int]) -> dict[str, dict[int, int]]:
    """``room``: how many more partitions the token may name (counted down)."""
    if not isinstance(document, dict):
        raise BadTokenError(f"{name} must be an object of topics")
    offsets: dict[str, dict[int, int]] = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict):
            raise BadTokenError(
                f"{name}.{_short(topic, quoted=False)} must be an object of partitions"
            )
        room[0] -= len(partitions)
        if room[0] < 0:
            raise BadTokenError("names more partitions than serving_token_partitions allows")
        offsets[topic] = {}
        where = f"{name}.{_short(topic, quoted=False)}"
        for partition, offset in partitions.items():
            if not PARTITION.fullmatch(partition):
                raise BadTokenError(f"{where}: partition {_short(partition)} is not a number")
            if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:
                raise BadTokenError(f"{where}.{partition}: {_short(offset)} is not an offset")
            offsets[topic][int(partition)] = offset
    return offsets


def _short(value: object, quoted: bool = True) -> str:
    """A value of a token as an error names it: at most 40 characters of its repr (of
    its text, not ``quoted``)."""
    text = repr(value) if quoted else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _document(offsets: Offsets) -> dict[str, dict[str, int]]:
    return {
        topic: {str(partition): offset for partition, offset in sorted(partitions.items())}
        for topic, partitions in sorted(offsets.items())
    }


@dataclass(frozen=True)
class ConsistencyToken:
    batch_version: int | None = None
    horizon: datetime | None = None
    speed: Offsets = field(default_factory=dict)
    input: Offsets = field(default_factory=dict)
    generation: int | None = None

    def encode(self) -> str:
        document: dict[str, Any] = {"v": TOKEN_FORMAT}
        if self.generation is not None:
            document["generation"] = self.generation
        if self.batch_version is not None:
            document["batch_version"] = self.batch_version
        if self.horizon is not None:
            document["horizon"] = format_instant(self.horizon)
        document["speed"] = _document(self.speed)
        document["input"] = _document(self.input)
        text = json.dumps(document, separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(
        cls, token: str, max_bytes: int = 8192, max_partitions: int = 1024
    ) -> ConsistencyToken:
        """Raises :class:`BadTokenError` naming what is wrong; a token longer than
        ``max_bytes`` or naming more than ``max_partitions`` partitions is refused before
        its parts are read."""
        if len(token) > max_bytes:
            raise BadTokenError(
                f"{len(token)} characters; at most {max_bytes} are read (serving_token_bytes)"
            )
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            document = json.loads(raw)
        except (binascii.Error, ValueError, RecursionError):  # RecursionError: nested deep
            raise BadTokenError("not base64url of a JSON object") from None
        if not isinstance(document, dict):
            raise BadTokenError("not base64url of a JSON object")
        if document.get("v") != TOKEN_FORMAT:
            raise BadTokenError(f"format {_short(document.get('v'))} is not {TOKEN_FORMAT}")
        version = document.get("batch_version")
        if version is not None and (type(version) is not int or not 1 <= version <= MAX_OFFSET):
            raise BadTokenError(f"batch_version {_short(version)} is not a version number")
        generation = document.get("generation")
        if generation is not None and (
            type(generation) is not int or not 1 <= generation <= MAX_OFFSET
        ):
            raise BadTokenError(f"generation {_short(generation)} is not a generation number")
        horizon = document.get("horizon")
        try:
            if horizon is not None and not isinstance(horizon, str):
                raise ValueError(horizon)
            parsed = parse_instant(horizon) if horizon is not None else None
        except (ValueError, OverflowError):  # OverflowError: before year 1 in UTC
            raise BadTokenError(
                f"horizon {_short(horizon)} is not an ISO-8601 instant of the years 1 to 9999"
            ) from None
        room = [max_partitions]
        return cls(
            batch_version=version,
            generation=generation,
            horizon=parsed,
            speed=_offsets(document.get("speed", {}), "speed", room),
            input=_offsets(document.get("input", {}), "input", room),
        )

    def behind(self, wanted: ConsistencyToken) -> list[str]:
        """What this (a worker's state) lacks of ``wanted``, in words; empty: nothing.

        A token of another generation than this one's names another batch store and
        other speed topics, and another job's progress through the input: nothing of it
        orders against this one, so nothing is waited for (the answer says so)."""
        lacking: list[str] = []
        if self.other_generation(wanted):
            return lacking
        if wanted.batch_version is not None and (
            self.batch_version is None or self.batch_version < wanted.batch_version
        ):
            serving = self.batch_version if self.batch_version is not None else "none"
            lacking.append(f"batch version {wanted.batch_version} (serving {serving})")
        for name, have, want in (
            ("speed", self.speed, wanted.speed),
            ("input", self.input, wanted.input),
        ):
            for topic, partitions in sorted(want.items()):
                for partition, offset in sorted(partitions.items()):
                    held = have.get(topic, {}).get(partition, 0)
                    if held < offset:
                        lacking.append(f"{name} {topic}[{partition}] to {offset} (at {held})")
        return lacking

    def other_generation(self, wanted: ConsistencyToken) -> bool:
        """``wanted`` names a generation, and not this one's (no generation: the first)."""
        return wanted.generation is not None and wanted.generation != (self.generation or 1)


@dataclass
class _Report:
    query: str
    offsets: dict[tuple[str, int], int]
    ends: dict[tuple[str, int], int] | None = None
    """The speed store's end offsets asked for after the report was read."""


class InputProgress:
    """Which input offsets the rows a worker has applied reflect.

    A speed query's progress report (``speed.progress``) names the input offsets
    its micro-batch read to; the job writes the micro-batch's rows before the
    report. So once the worker has read the speed store up to end offsets asked
    for *after* reading the report, those rows are applied, and the report's
    offsets count. An input partition's offset is the least over the queries
    that read its topic: an event is materialised once every query that uses
    it has processed it.

    Fed by the consumer thread; :attr:`offsets` is replaced whole, so readers on
    other threads see one state or the next.
    """

    def __init__(self, input_topics: Iterable[str]):
        self.input_topics = frozenset(input_topics)
        self._reports: list[_Report] = []
        self._done: dict[str, dict[tuple[str, int], int]] = {}
        """Per query, the input offsets whose output is applied."""
        self._reads: dict[str, frozenset[tuple[str, int]]] = {}
        """Per query, the input partitions its latest report names."""
        self.offsets: dict[str, dict[int, int]] = {}

    def reported(self, query: str, source_end_offsets: object) -> None:
        """A progress report read from ``speed.progress``: ``source_end_offsets`` as the
        report holds it (a list of Spark offsets, one per source)."""
        offsets: dict[tuple[str, int], int] = {}
        for source in source_end_offsets if isinstance(source_end_offsets, list) else []:
            for topic, partitions in (source if isinstance(source, dict) else {}).items():
                if topic in self.input_topics and isinstance(partitions, dict):
                    for partition, offset in partitions.items():
                        if str(partition).isdigit() and type(offset) is int:
                            offsets[(topic, int(partition))] = offset
        if offsets:
            self._reads[query] = frozenset(offsets)
            self._reports.append(_Report(query, offsets))

    @property
    def has_reports(self) -> bool:
        """Reports read whose offsets do not count yet."""
        return bool(self._reports)

    @property
    def awaiting_ends(self) -> bool:
        """Reports read that still need the speed store's end offsets asked for."""
        return any(report.ends is None for report in self._reports)

    def ends_asked(self, ends: Mapping[tuple[str, int], int]) -> None:
        """The speed store's end offsets, asked for after every report read so far."""
        asked = {partition: end for partition, end in ends.items()}
        merged: dict[str, _Report] = {}  # one per query: the same ends settle them together
        kept = []
        for report in self._reports:
            if report.ends is not None:
                kept.append(report)
                continue
            into = merged.setdefault(report.query, _Report(report.query, {}, asked))
            for partition, offset in report.offsets.items():
                into.offsets[partition] = max(into.offsets.get(partition, 0), offset)
        self._reports = [*kept, *merged.values()]

    def positions_reached(self, positions: Mapping[tuple[str, int], int]) -> None:
        """The worker has applied the speed store up to ``positions``: settle every
        report whose end offsets they reach."""
        waiting = []
        for report in self._reports:
            if report.ends is not None and all(
                positions.get(partition, 0) >= end for partition, end in report.ends.items()
            ):
                done = self._done.setdefault(report.query, {})
                for partition, offset in report.offsets.items():
                    done[partition] = max(done.get(partition, 0), offset)
            else:
                waiting.append(report)
        if len(waiting) != len(self._reports):
            self._reports = waiting
            self.offsets = self._never_back(self._least())

    def _never_back(self, least: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
        """``least``, each partition no lower than it was: a query whose first report is
        read after the others' (a job starting, its lookups slower than its booths) would
        lower the least, and a token this worker handed out would then wait for what it
        had already said it held (reads must stay monotonic)."""
        for topic, partitions in self.offsets.items():
            for partition, offset in partitions.items():
                held = least.setdefault(topic, {})
                held[partition] = max(held.get(partition, 0), offset)
        return least

    def _least(self) -> dict[str, dict[int, int]]:
        least: dict[str, dict[int, int]] = {}
        partitions = {partition for reads in self._reads.values() for partition in reads}
        for topic, number in sorted(partitions):
            readers = [query for query, reads in self._reads.items() if (topic, number) in reads]
            least.setdefault(topic, {})[number] = min(
                self._done.get(query, {}).get((topic, number), 0) for query in readers
            )
        return least

    def forget(self) -> None:
        """Start over (the speed store's or the progress topic was created again)."""
        self._reports, self._done, self._reads = [], {}, {}
        self.offsets = {}
