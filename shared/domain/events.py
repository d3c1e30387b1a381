"""The three input event types, defined once.

Each event type is a frozen dataclass. From that one definition come the
Python type (used by the generator and tests), the Spark schema (used by both
layers after validation), the JSON encoding on Kafka, and the field rules that
validation enforces. Adding a field means adding it here and nowhere else.

Wire format (docs/architecture.md): JSON objects in UTF-8; times are ISO-8601 UTC strings
with milliseconds (``2026-11-22T08:15:00.250Z``); ``toll`` is a JSON number with
at most two decimal places; ``vehicle_type`` is a JSON integer.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, NewType

from pyspark.sql import types as T

EventId = NewType("EventId", str)
BoothId = NewType("BoothId", str)
LicensePlate = NewType("LicensePlate", str)
RegistrationId = NewType("RegistrationId", str)
Toll = NewType("Toll", Decimal)
"""An amount of money with two decimal places."""


@dataclass(frozen=True, slots=True)
class TollEntry:
    """A vehicle entering the road at a toll booth."""

    event_id: EventId
    booth_id: BoothId
    entry_time: datetime
    license_plate: LicensePlate
    state: str
    make: str
    model: str
    vehicle_type: int
    weight_kg: float
    toll: Toll
    tag: str


@dataclass(frozen=True, slots=True)
class TollExit:
    """A vehicle leaving the road at the booth it entered through."""

    event_id: EventId
    booth_id: BoothId
    exit_time: datetime
    license_plate: LicensePlate


@dataclass(frozen=True, slots=True)
class VehicleRegistration:
    """A registration record of a vehicle; the latest one before an entry applies."""

    event_id: EventId
    registration_id: RegistrationId
    license_plate: LicensePlate
    expired: bool
    registration_time: datetime


Event = TollEntry | TollExit | VehicleRegistration


class FieldKind(StrEnum):
    """What a field holds on the wire, which decides how it is validated and typed."""

    TEXT = "text"
    IDENTIFIER = "identifier"  # text that must not be empty (ids, booth, plate)
    TIMESTAMP = "timestamp"
    INTEGER = "integer"
    NUMBER = "number"
    MONEY = "money"
    BOOLEAN = "boolean"


_IDENTIFIER_TYPES = (EventId, BoothId, LicensePlate, RegistrationId)

_SPARK_TYPES: Mapping[FieldKind, T.DataType] = {
    FieldKind.TEXT: T.StringType(),
    FieldKind.IDENTIFIER: T.StringType(),
    FieldKind.TIMESTAMP: T.TimestampType(),
    FieldKind.INTEGER: T.IntegerType(),
    FieldKind.NUMBER: T.DoubleType(),
    FieldKind.MONEY: T.DecimalType(12, 2),
    FieldKind.BOOLEAN: T.BooleanType(),
}


def _field_kind(annotation: Any) -> FieldKind:
    if annotation in _IDENTIFIER_TYPES:
        return FieldKind.IDENTIFIER
    if annotation is Toll:
        return FieldKind.MONEY
    by_type = {
        str: FieldKind.TEXT,
        datetime: FieldKind.TIMESTAMP,
        bool: FieldKind.BOOLEAN,
        int: FieldKind.INTEGER,
        float: FieldKind.NUMBER,
    }
    if annotation in by_type:
        return by_type[annotation]
    raise TypeError(f"no wire format for field type {annotation!r}")


@dataclass(frozen=True, slots=True)
class EventField:
    name: str
    kind: FieldKind

    @property
    def spark_type(self) -> T.DataType:
        return _SPARK_TYPES[self.kind]


@dataclass(frozen=True, slots=True)
class EventType:
    """An event type: its Python class, where it travels and which field is its time."""

    name: str
    python_type: type[Event]
    topic_role: str  # the field of shared.domain.topics.Topics that names its topic
    key_field: str
    time_field: str

    @property
    def fields(self) -> tuple[EventField, ...]:
        hints = typing.get_type_hints(self.python_type)
        return tuple(
            EventField(field.name, _field_kind(hints[field.name]))
            for field in dataclasses.fields(self.python_type)
        )

    @property
    def spark_schema(self) -> T.StructType:
        """Schema of validated events of this type (all fields non-null after validation)."""
        return T.StructType(
            [T.StructField(field.name, field.spark_type, nullable=False) for field in self.fields]
        )


TOLL_ENTRY = EventType("toll_entry", TollEntry, "entries", "license_plate", "entry_time")
TOLL_EXIT = EventType("toll_exit", TollExit, "exits", "license_plate", "exit_time")
VEHICLE_REGISTRATION = EventType(
    "vehicle_registration",
    VehicleRegistration,
    "registrations",
    "license_plate",
    "registration_time",
)
EVENT_TYPES: tuple[EventType, ...] = (TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION)


def event_type_of(event: Event) -> EventType:
    for event_type in EVENT_TYPES:
        if isinstance(event, event_type.python_type):
            return event_type
    raise TypeError(f"not an event: {event!r}")


# --- JSON wire format ---------------------------------------------------------


INSTANT_STRFTIME = "%Y-%m-%dT%H:%M:%S.%gZ"
""":func:`format_instant`'s format in DuckDB's ``strftime`` spelling (``%g``: milliseconds).

For zone-less UTC ``TIMESTAMP`` columns, so a store can hand out wire-ready
instants; a unit test holds the two spellings to the same output."""


def format_instant(instant: datetime) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2026-11-22T08:15:00.250Z``."""
    if instant.tzinfo is not UTC:
        if instant.tzinfo is None:
            raise ValueError("instants must be timezone-aware")
        instant = instant.astimezone(UTC)
    return instant.isoformat(timespec="milliseconds")[:-6] + "Z"  # "+00:00" -> "Z"


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant with a zone (``Z`` or an offset), as an aware UTC datetime."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return parsed.astimezone(UTC)


def _money_to_wire(amount: Decimal) -> float:
    return float(amount)  # two decimal places print exactly as a float


_TO_WIRE: Mapping[FieldKind, Callable[[Any], Any]] = {
    FieldKind.TIMESTAMP: format_instant,
    FieldKind.MONEY: _money_to_wire,
}


@dataclass(frozen=True, slots=True)
class _WirePlan:
    """How to turn one event type into its JSON object, worked out once per type.

    The generator encodes hundreds of thousands of events a second, so field
    values are read with one attrgetter call and only the fields that need a
    conversion (times, money) are touched.
    """

    names: tuple[str, ...]
    values_of: Callable[[Any], tuple[Any, ...]]
    conversions: tuple[tuple[int, Callable[[Any], Any]], ...]

    @classmethod
    def of(cls, event_type: EventType) -> _WirePlan:
        fields = event_type.fields
        names = tuple(field.name for field in fields)
        conversions = tuple(
            (index, _TO_WIRE[field.kind])
            for index, field in enumerate(fields)
            if field.kind in _TO_WIRE
        )
        return cls(names, operator.attrgetter(*names), conversions)


_WIRE_PLANS: dict[type, _WirePlan] = {
    event_type.python_type: _WirePlan.of(event_type) for event_type in EVENT_TYPES
}


def event_to_wire(event: Event) -> dict[str, Any]:
    """The JSON object of an event, as it travels on Kafka."""
    plan = _WIRE_PLANS[type(event)]
    values = list(plan.values_of(event))
    for index, convert in plan.conversions:
        values[index] = convert(values[index])
    return dict(zip(plan.names, values, strict=True))


_compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_event(event: Event) -> bytes:
    """The Kafka record value of an event: compact UTF-8 JSON."""
    return _compact_json(event_to_wire(event)).encode()
