"""Freshness probes: real-time events, each timed from send() until the API shows it.

While the continuous speed job runs (and the generator sends traffic in real time
beside it), every probe is a trip of a probe vehicle of its own through the probe
booth, its event times the wall clock. First its registration, recorded as expired,
so that its entry raises an alert; then:

1. its entry: visible in ``booth_stats`` once its window's count at the probe
   booth includes it, and as an ``expired_registrations`` alert of that entry:
   both are timed from the entry's send();
2. half a second later, its exit: visible as the trip of that entry, timed
   from the exit's send();
3. with ``visits``, its visit (its one entry): written once the watermark passes
   the visit's end, entry + ``session_gap``, which it can first do when the
   input's latest event is ``watermark`` later. It is timed from that instant.

Each look asks the API for the rows of the probes pending only, each a point
lookup (one window of the booth, one entry's alert, one vehicle's trip or
visit), so that watching costs the machine it measures little.

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
"""The probe vehicles' plates: this, a run's mark and the probe's number."""
PROBED_VIEWS = ("booth_stats", "vehicle_trips", "expired_registrations")
"""The views a probe is timed in, each from the event that makes its row."""
VISITS = "vehicle_visits"
"""Timed too with ``visits``: from the instant the watermark can pass the visit's end."""
EXIT_AFTER_S = 0.5
POLL_S = 0.25
AGE_SHARE = 0.05
"""How often the watcher asks the API for a pending probe's row: every ``POLL_S`` at
first, then every ``AGE_SHARE`` of the probe's age, so that a figure is resolved to 0.25 s
or 5 %, and probes a lagging job leaves pending for minutes do not load the API it serves
(a look every quarter second per probe and view did: most of the API's CPU)."""


def _now() -> datetime:
    """The wall clock to the millisecond, as events carry their times."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass
class Probe:
    at: datetime
    plate: str
    window: str
    """The start of its entry's ``booth_stats`` window, as the API writes it."""
    ordinal: int
    """Its place among the probes of that window: the count that shows it."""
    views: tuple[str, ...]
    sent: dict[str, float] = field(default_factory=dict)
    """Per view, when (monotonic) the row could first be there: the probe is timed from it."""
    seen: dict[str, float] = field(default_factory=dict)
    looked: dict[str, float] = field(default_factory=dict)
    """Per view, when (monotonic) the watcher last asked for its row."""

    @property
    def pending(self) -> list[str]:
        """The views it is timed in that it was not seen in yet, could be now, and are due
        a look (:data:`AGE_SHARE`)."""
        now = time.monotonic()
        return [
            view
            for view in self.views
            if view not in self.seen
            and self.sent.get(view, now + 1) <= now
            and now - self.looked.get(view, float("-inf"))
            >= max(POLL_S, (now - self.sent[view]) * AGE_SHARE) - 0.01
        ]

    @property
    def done(self) -> bool:
        return len(self.seen) == len(self.views)


class FreshnessProbes:
    """Sends probes and watches the API for them (a thread of its own)."""

    def __init__(
        self, settings: Settings, client: httpx2.Client, producer: KafkaProducer,
        visits: bool = False,
    ) -> None:  # fmt: skip
        self.settings, self.client, self.producer = settings, client, producer
        self.views = (*PROBED_VIEWS, VISITS) if visits else PROBED_VIEWS
        self.probes: list[Probe] = []
        self.mark = secrets.token_hex(3).upper()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="probe-watcher", daemon=True)

    def __enter__(self) -> FreshnessProbes:
        self._watcher.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._watcher.join()

    def send(self) -> Probe:
        """One probe: its registration and its entry now, its exit :data:`EXIT_AFTER_S`
        later."""
        topics, views = self.settings.topics, self.settings.views
        with self._lock:
            number = len(self.probes) + 1
        plate = LicensePlate(f"{PROBE_PLATE}-{self.mark}-{number}")
        registered = _now()
        registration = VehicleRegistration(
            event_id=EventId(f"probe-r-{self.mark}-{number}"),
            registration_id=RegistrationId(f"PROBE-R-{number}"), license_plate=plate,
            expired=True, registration_time=registered - timedelta(milliseconds=1),
        )  # fmt: skip
        self._send(topics.registrations, plate, encode_event(registration), registered)
        self.producer.flush()
        at = _now()
        window = format_instant(bucket_start(at, views.sizes["window"]))
        with self._lock:
            ordinal = 1 + sum(1 for probe in self.probes if probe.window == window)
            probe = Probe(at, plate, window, ordinal, self.views)
            self.probes.append(probe)
        entry = TollEntry(
            event_id=EventId(f"probe-e-{self.mark}-{number}"),
            booth_id=BoothId(PROBE_BOOTH), entry_time=at, license_plate=plate,
            state="NY", make="Ford", model="Focus", vehicle_type=1, weight_kg=1200.0,
            toll=Toll(Decimal("2.50")), tag="",
        )  # fmt: skip
        sent = time.monotonic()
        self._send(topics.entries, plate, encode_event(entry), at)
        self.producer.flush()
        probe.sent["booth_stats"] = probe.sent["expired_registrations"] = sent
        if VISITS in self.views:
            closes = views.sizes["session_gap"] + views.watermark
            probe.sent[VISITS] = sent + closes.total_seconds()
        time.sleep(EXIT_AFTER_S)
        left = _now()
        exit_ = TollExit(
            event_id=EventId(f"probe-x-{self.mark}-{number}"),
            booth_id=BoothId(PROBE_BOOTH), exit_time=left, license_plate=plate,
        )  # fmt: skip
        sent = time.monotonic()
        self._send(topics.exits, plate, encode_event(exit_), left)
        self.producer.flush()
        probe.sent["vehicle_trips"] = sent
        return probe

    def _send(self, topic: str, plate: str, value: bytes, at: datetime) -> None:
        self.producer.send(
            topic, key=plate.encode(), value=value, timestamp_ms=int(at.timestamp() * 1000)
        )

    def wait_seen(self, probes: list[Probe], timeout_s: float) -> bool:
        """True once every view of these probes was seen, False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(probe.done for probe in probes):
                return True
            time.sleep(0.1)
        return False

    def latencies(self, probes: list[Probe]) -> dict[str, list[float]]:
        """Per view, each seen probe's seconds from send() to visible."""
        return {
            view: [p.seen[view] - p.sent[view] for p in probes if view in p.seen]
            for view in self.views
        }

    # --- watching -------------------------------------------------------------------------
    def _get(self, path: str, since: datetime, until: datetime, **params: str) -> list[Any]:
        """The rows of one answer over [since, until), or none (a plate not known yet: 404)."""
        span = {"from": format_instant(since), "to": format_instant(until)}
        try:
            response = self.client.get(path, params={**span, **params})
        except httpx2.TransportError:
            return []
        if response.status_code != 200:
            return []
        rows: list[Any] = response.json()["rows"]
        return rows

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                pending = [(p, views) for p in self.probes if (views := p.pending)]
            if pending:
                self._look(pending)
            self._stop.wait(POLL_S)

    def _look(self, pending: list[tuple[Probe, list[str]]]) -> None:
        window = self.settings.views.sizes["window"]
        instant = timedelta(milliseconds=1)
        counts: dict[str, int] = {}
        for probe, views in pending:
            entered = format_instant(probe.at)
            for view in views:
                probe.looked[view] = time.monotonic()
            if "booth_stats" in views:
                if probe.window not in counts:  # one look per window
                    start = datetime.fromisoformat(probe.window.replace("Z", "+00:00"))
                    rows = self._get(f"/v1/booths/{PROBE_BOOTH}/stats", start, start + window)
                    counts[probe.window] = sum(row["vehicle_count"] for row in rows)
                if counts[probe.window] >= probe.ordinal:
                    probe.seen["booth_stats"] = time.monotonic()
            looks = {
                "expired_registrations": ("/v1/alerts/expired-registrations",
                                          {"booth_id": PROBE_BOOTH}),
                "vehicle_trips": (f"/v1/vehicles/{probe.plate}/trips", {}),
                VISITS: (f"/v1/vehicles/{probe.plate}/visits", {}),
            }  # fmt: skip
            for view, (path, params) in looks.items():
                if view in views:
                    rows = self._get(path, probe.at, probe.at + instant, **params)
                    if any(
                        row.get("entry_time", row.get("session_start")) == entered for row in rows
                    ):
                        probe.seen[view] = time.monotonic()
