"""Freshness probes: real-time events, each timed from send() until the API shows it.

While the continuous speed job runs (and the generator sends the demo's traffic
in real time beside it), every probe is one vehicle of a plate of its own at a
booth of its own, its event times the wall clock:

1. a registration of its plate, recorded a second before the entry as expired;
2. its entry: visible in ``booth_stats`` once its window's count at the probe
   booth includes it, and as an ``expired_registrations`` alert: both are timed
   from the entry's send();
3. half a second later, its exit: visible as a trip of its plate, timed from
   the exit's send().

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
PROBED_VIEWS = ("booth_stats", "vehicle_trips", "expired_registrations")
"""The views a probe is timed in, each from the event that makes its row."""
EXIT_AFTER_S = 0.5
POLL_S = 0.05


@dataclass
class Probe:
    plate: str
    at: datetime
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
        self._watcher.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._watcher.join()

    def send(self) -> Probe:
        """One probe: its registration and entry now, its exit :data:`EXIT_AFTER_S` later."""
        at = datetime.now(UTC)
        plate = f"PROBE-{len(self.probes)}-{secrets.token_hex(3)}"
        window = format_instant(bucket_start(at, self.settings.views.window))
        with self._lock:
            ordinal = 1 + sum(1 for probe in self.probes if probe.window == window)
            probe = Probe(plate, at, window, ordinal)
            self.probes.append(probe)
        topics, key = self.settings.topics, plate.encode()
        registration = VehicleRegistration(
            event_id=EventId(f"{plate}-r"), registration_id=RegistrationId(f"{plate}-R"),
            license_plate=LicensePlate(plate), expired=True,
            registration_time=at - timedelta(seconds=1),
        )  # fmt: skip
        self._send(topics.registrations, key, encode_event(registration), at)
        self.producer.flush()
        entry = TollEntry(
            event_id=EventId(f"{plate}-e"), booth_id=BoothId(PROBE_BOOTH), entry_time=at,
            license_plate=LicensePlate(plate), state="NY", make="Ford", model="Focus",
            vehicle_type=1, weight_kg=1200.0, toll=Toll(Decimal("2.50")), tag="",
        )  # fmt: skip
        probe.sent["booth_stats"] = probe.sent["expired_registrations"] = time.monotonic()
        self._send(topics.entries, key, encode_event(entry), at)
        self.producer.flush()
        time.sleep(EXIT_AFTER_S)
        left = datetime.now(UTC)
        exit_ = TollExit(
            event_id=EventId(f"{plate}-x"),
            booth_id=BoothId(PROBE_BOOTH),
            exit_time=left,
            license_plate=LicensePlate(plate),
        )
        probe.sent["vehicle_trips"] = time.monotonic()
        self._send(topics.exits, key, encode_event(exit_), left)
        self.producer.flush()
        return probe

    def _send(self, topic: str, key: bytes, value: bytes, at: datetime) -> None:
        self.producer.send(topic, key=key, value=value, timestamp_ms=int(at.timestamp() * 1000))

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
        alerted = {row["license_plate"] for row in (alerts or {"rows": []})["rows"]}
        for probe in pending:
            if "booth_stats" in probe.sent and counts.get(probe.window, 0) >= probe.ordinal:
                probe.seen.setdefault("booth_stats", stats_at)
            if "expired_registrations" in probe.sent and probe.plate in alerted:
                probe.seen.setdefault("expired_registrations", alerts_at)
            if "vehicle_trips" in probe.sent and "vehicle_trips" not in probe.seen:
                trips = self._get(f"/v1/vehicles/{probe.plate}/trips")
                if trips is not None and trips["rows"]:
                    probe.seen["vehicle_trips"] = time.monotonic()
