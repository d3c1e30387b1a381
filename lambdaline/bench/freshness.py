"""Freshness probes: real-time events, each timed from send() until the API shows it.

While the continuous speed job runs (and the generator sends the demo's traffic
in real time beside it), every probe is a trip of one probe vehicle through a
booth of its own, its event times the wall clock. Before the first, the
vehicle's registration is recorded as expired, so each entry raises an alert.

1. its entry: visible in ``booth_stats`` once its window's count at the probe
   booth includes it, and as an ``expired_registrations`` alert of that entry:
   both are timed from the entry's send();
2. half a second later, its exit: visible as the trip of that entry, timed
   from the exit's send().

The watcher asks the API three questions per round (the booth's windows, its
alerts, the vehicle's trips), whatever the number of probes waiting, so that
watching costs the machine it measures little.

Speed rows are served provisional (``final: false``) as soon as the speed
layer writes them, so this is what a user waits for: a row to appear, not to
turn final (that takes the watermark delay, or max_trip for a trip).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx2
from kafka import KafkaProducer

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
    format_instant,
)
from shared.domain.merge import bucket_start
from shared.settings import Settings

PROBE_BOOTH = "bench-probe"
PROBE_PLATE = "BENCH-PROBE"
PROBED_VIEWS = ("booth_stats", "vehicle_trips", "expired_registrations")
"""The views a probe is timed in, each from the event that makes its row."""
EXIT_AFTER_S = 0.5
POLL_S = 0.25
"""How often the watcher asks the API while a probe is pending: the figures' resolution.
Each look is three queries, and an alert's scans the speed store's alerts (about a row
per entry): at 10 looks a second they took a sixth of the API's CPU under a soak."""


def _now() -> datetime:
    """The wall clock to the millisecond, as events carry their times."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass
class Probe:
    at: datetime
    entry_time: str
    """Its entry_time as the API writes it: the key of its trip and its alert."""
    window: str
    """The start of its entry's ``booth_stats`` window, as the API writes it."""
    ordinal: int
    """Its place among the probes of that window: the count that shows it."""
    sent: dict[str, float] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)


class FreshnessProbes:
    """Sends probes and watches the API for them (a thread of its own)."""

    def __init__(self, settings: Settings, client: httpx2.Client, producer: KafkaProducer):
        self.settings, self.client, self.producer = settings, client, producer
        self.probes: list[Probe] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="probe-watcher", daemon=True)
        self.begun = datetime.now(UTC)

    def __enter__(self) -> FreshnessProbes:
        at = _now()
        registration = VehicleRegistration(
            event_id=EventId(f"probe-r-{secrets.token_hex(4)}"),
            registration_id=RegistrationId("PROBE-R"), license_plate=LicensePlate(PROBE_PLATE),
            expired=True, registration_time=at,
        )  # fmt: skip
        self._send(self.settings.topics.registrations, encode_event(registration), at)
        self.producer.flush()
        time.sleep(0.01)  # every entry comes after it
        self._watcher.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._watcher.join()

    def send(self) -> Probe:
        """One probe: its entry now, its exit :data:`EXIT_AFTER_S` later."""
        at = _now()
        window = format_instant(bucket_start(at, self.settings.views.sizes["window"]))
        with self._lock:
            ordinal = 1 + sum(1 for probe in self.probes if probe.window == window)
            probe = Probe(at, format_instant(at), window, ordinal)
            self.probes.append(probe)
        number, topics = len(self.probes), self.settings.topics
        entry = TollEntry(
            event_id=EventId(f"probe-e-{number}-{secrets.token_hex(4)}"),
            booth_id=BoothId(PROBE_BOOTH), entry_time=at, license_plate=LicensePlate(PROBE_PLATE),
            state="NY", make="Ford", model="Focus", vehicle_type=1, weight_kg=1200.0,
            toll=Toll(Decimal("2.50")), tag="",
        )  # fmt: skip
        probe.sent["booth_stats"] = probe.sent["expired_registrations"] = time.monotonic()
        self._send(topics.entries, encode_event(entry), at)
        self.producer.flush()
        time.sleep(EXIT_AFTER_S)
        left = _now()
        exit_ = TollExit(
            event_id=EventId(f"probe-x-{number}-{secrets.token_hex(4)}"),
            booth_id=BoothId(PROBE_BOOTH), exit_time=left, license_plate=LicensePlate(PROBE_PLATE),
        )  # fmt: skip
        probe.sent["vehicle_trips"] = time.monotonic()
        self._send(topics.exits, encode_event(exit_), left)
        self.producer.flush()
        return probe

    def _send(self, topic: str, value: bytes, at: datetime) -> None:
        self.producer.send(
            topic, key=PROBE_PLATE.encode(), value=value, timestamp_ms=int(at.timestamp() * 1000)
        )

    def wait_seen(self, probes: list[Probe], timeout_s: float) -> bool:
        """True once every view of these probes was seen, False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(len(probe.seen) == len(PROBED_VIEWS) for probe in probes):
                return True
            time.sleep(0.1)
        return False

    def latencies(self, probes: list[Probe]) -> dict[str, list[float]]:
        """Per view, each seen probe's seconds from send() to visible."""
        return {
            view: [p.seen[view] - p.sent[view] for p in probes if view in p.seen]
            for view in PROBED_VIEWS
        }

    # --- watching -------------------------------------------------------------------------
    def _get(self, path: str, **params: str) -> dict[str, Any] | None:
        span = {"from": format_instant(self.begun - timedelta(hours=1)),
                "to": format_instant(self.begun + timedelta(days=1))}  # fmt: skip
        try:
            response = self.client.get(path, params={**span, **params})
        except httpx2.TransportError:
            return None
        if response.status_code != 200:  # a plate not known yet: 404
            return None
        body: dict[str, Any] = response.json()
        return body

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                pending = [p for p in self.probes if len(p.seen) < len(PROBED_VIEWS)]
            if pending:
                self._look(pending)
            self._stop.wait(POLL_S)

    def _look(self, pending: list[Probe]) -> None:
        stats = self._get(f"/v1/booths/{PROBE_BOOTH}/stats")
        stats_at = time.monotonic()
        counts = {
            row["window_start"]: row["vehicle_count"] for row in (stats or {"rows": []})["rows"]
        }
        alerts = self._get("/v1/alerts/expired-registrations", booth_id=PROBE_BOOTH)
        alerts_at = time.monotonic()
        alerted = {row["entry_time"] for row in (alerts or {"rows": []})["rows"]}
        trips = self._get(f"/v1/vehicles/{PROBE_PLATE}/trips")
        trips_at = time.monotonic()
        # an entry's trip: its earliest exit, which is the probe's own (the vehicle's
        # next entry comes after it)
        ended = {row["entry_time"] for row in (trips or {"rows": []})["rows"]}
        for probe in pending:
            if "booth_stats" in probe.sent and counts.get(probe.window, 0) >= probe.ordinal:
                probe.seen.setdefault("booth_stats", stats_at)
            if "expired_registrations" in probe.sent and probe.entry_time in alerted:
                probe.seen.setdefault("expired_registrations", alerts_at)
            if "vehicle_trips" in probe.sent and probe.entry_time in ended:
                probe.seen.setdefault("vehicle_trips", trips_at)
