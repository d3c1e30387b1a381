"""Prometheus metrics: request latency by route, store versions, speed lag.

Each app has its own registry (no process-global collectors), so tests and
several apps in one process never collide.

With several worker processes (``lambdaline serve --workers N``) a scrape
reaches one of them, so each would show only its own share. ``lambdaline
serve`` then runs prometheus_client's multiprocess mode: it sets
``PROMETHEUS_MULTIPROC_DIR`` (a directory of its own) before the workers start,
every worker writes its values there, and ``/metrics`` reads them all back:
counters and histograms summed, each gauge combined as its ``multiprocess_mode``
says. Each worker refreshes its gauges every second (:func:`refresh_gauges`),
not only when it answers a scrape, and removes its live gauges when it stops;
those of a worker killed outright go at the next refresh of any other
(:func:`forget_dead_workers`).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from functools import partial
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

router = APIRouter(tags=["status"])

CORRECTION_KINDS = ("equal", "corrected", "only_in_batch", "only_in_speed")

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""Set (before prometheus_client is imported) in every worker of a multi-process server."""


def multiprocess_mode() -> bool:
    return bool(os.environ.get(MULTIPROCESS_DIR))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "lambdaline_http_request_duration_seconds", "request latency by route",
            ["method", "route", "status"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )  # fmt: skip
        self.cache_responses = Counter(
            "lambdaline_batch_cache_responses", "view responses by their X-Cache header",
            ["result"], registry=self.registry,
        )  # fmt: skip
        # with several workers (the last argument): the lowest version and horizon any of
        # them serves, the largest lag, 0 if any consumer is down, the earliest watermark
        gauge = partial(Gauge, registry=self.registry)
        self.generation = gauge(
            "lambdaline_generation", "served generation of the views (lambdaline generation)",
            multiprocess_mode="livemin",
        )  # fmt: skip
        self.batch_version = gauge(
            "lambdaline_batch_version", "served batch version (-1: none)",
            multiprocess_mode="livemin",
        )  # fmt: skip
        self.batch_horizon = gauge(
            "lambdaline_batch_horizon_seconds", "batch horizon, Unix time",
            multiprocess_mode="livemin",
        )  # fmt: skip
        self.speed_lag = gauge(
            "lambdaline_speed_lag_records",
            "speed-store records on the broker not read yet (-1: not connected yet)",
            multiprocess_mode="livemax",
        )  # fmt: skip
        self.speed_consumer_up = gauge(
            "lambdaline_speed_consumer_up",
            "1 while the speed-store consumer follows Kafka, 0 while it retries (see /v1/status)",
            multiprocess_mode="livemin",
        )  # fmt: skip
        self.cache_bytes = gauge(
            "lambdaline_batch_cache_bytes",
            "encoded rows the served version's cache holds (all workers' caches)",
            multiprocess_mode="livesum",
        )  # fmt: skip
        self.speed_watermark = gauge(
            "lambdaline_speed_watermark_seconds", "speed-layer watermark, Unix time",
            multiprocess_mode="livemin",
        )  # fmt: skip
        self.corrections = gauge(
            "lambdaline_batch_corrections_rows",
            "the served version's rows of the days it newly covered, against the speed "
            "layer's final rows: equal, corrected, only_in_batch, only_in_speed",
            ["view", "kind"], multiprocess_mode="livemax",
        )  # fmt: skip
        self.late_rows = gauge(
            "lambdaline_batch_speed_late_rows",
            "rows each speed query dropped as late between the previous version and the "
            "served one",
            ["query"], multiprocess_mode="livemax",
        )  # fmt: skip
        self.stream_clients = gauge(
            "lambdaline_stream_clients", "clients of GET /v1/stream", multiprocess_mode="livesum",
        )  # fmt: skip
        self.stream_queued = gauge(
            "lambdaline_stream_queued_events",
            "events the GET /v1/stream client furthest behind has still to read (it is "
            "dropped at the stream_queue setting)",
            multiprocess_mode="livemax",
        )  # fmt: skip
        self.stream_dropped = Counter(
            "lambdaline_stream_clients_dropped",
            "GET /v1/stream clients disconnected for reading slower than rows arrived",
            registry=self.registry,
        )  # fmt: skip
        self.speed_rejected = gauge(
            "lambdaline_speed_records_rejected",
            "speed-store records skipped as not rows of their view, since start",
            multiprocess_mode="livemax",
        )  # fmt: skip


class LatencyMiddleware:
    """Observes every HTTP request's latency by route template, and counts ``X-Cache`` values
    (plain ASGI: no extra task)."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name == b"x-cache":
                        self.metrics.cache_responses.labels(value.decode()).inc()
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.latency.labels(scope["method"], route, str(status)).observe(
                time.perf_counter() - started
            )


def refresh_gauges(app: FastAPI) -> None:
    """Set the gauges from this process's stores (they change without a request)."""
    metrics: Metrics = app.state.metrics
    served = app.state.generations.active
    version = served.reader.version
    metrics.batch_version.set(version.version if version else -1)
    metrics.batch_horizon.set(version.horizon.timestamp() if version else 0)
    corrections = (version.corrections or {}) if version else {}
    for view, counts in (corrections.get("views") or {}).items():
        for kind in CORRECTION_KINDS:
            metrics.corrections.labels(view, kind).set(counts.get(kind, 0))
    for query, rows in (corrections.get("late_rows_since_previous") or {}).items():
        metrics.late_rows.labels(query).set(rows)
    consumer = served.consumer
    lag = consumer.lag if consumer is not None else None
    metrics.speed_lag.set(lag if lag is not None else -1)
    metrics.speed_consumer_up.set(consumer is not None and consumer.following)
    with served.reader.snapshot() as snapshot:
        metrics.cache_bytes.set(snapshot.cache.bytes if snapshot is not None else 0)
    watermark = served.tables.watermark
    metrics.speed_watermark.set(watermark.timestamp() if watermark else 0)
    metrics.speed_rejected.set(served.tables.rejected)
    metrics.stream_clients.set(len(served.hub.clients))
    metrics.stream_queued.set(served.hub.most_queued)
    metrics.generation.set(served.number)


def process_stopped() -> None:
    """A worker of a multi-process server stops: its live gauges leave the combined values."""
    if multiprocess_mode():
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


def forget_dead_workers() -> None:
    """Take the live gauges of workers that died without stopping (SIGKILL, the OOM
    killer) out of the combined values; uvicorn starts a new worker in their place."""
    directory = Path(os.environ[MULTIPROCESS_DIR])
    matches = (_LIVE_GAUGE_FILE.fullmatch(path.name) for path in directory.iterdir())
    pids = {int(match[1]) for match in matches if match}
    for pid in pids:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            # another worker may remove the same files at the same moment
            with contextlib.suppress(FileNotFoundError):
                multiprocess.mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]
        except PermissionError:  # exists, under another user
            pass


@router.get("/metrics", response_class=Response)
def metrics_endpoint(request: Request) -> Response:
    """Prometheus text format (every worker's values, with several workers)."""
    refresh_gauges(request.app)
    registry = request.app.state.metrics.registry
    if multiprocess_mode():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
