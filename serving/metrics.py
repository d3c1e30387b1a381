"""Prometheus metrics: request latency by route, store versions, speed lag.

Each app has its own registry (no process-global collectors), so tests and
several apps in one process never collide.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

router = APIRouter(tags=["status"])


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "lambdaline_http_request_duration_seconds", "request latency by route",
            ["method", "route", "status"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )  # fmt: skip
        self.batch_version = Gauge(
            "lambdaline_batch_version", "served batch version (-1: none)", registry=self.registry
        )
        self.batch_horizon = Gauge(
            "lambdaline_batch_horizon_seconds", "batch horizon, Unix time", registry=self.registry
        )
        self.speed_lag = Gauge(
            "lambdaline_speed_lag_records",
            "speed-store records on the broker not read yet (-1: not connected yet)",
            registry=self.registry,
        )
        self.speed_consumer_up = Gauge(
            "lambdaline_speed_consumer_up",
            "1 while the speed-store consumer follows Kafka, 0 while it retries (see /v1/status)",
            registry=self.registry,
        )
        self.cache_responses = Counter(
            "lambdaline_batch_cache_responses", "view responses by their X-Cache header",
            ["result"], registry=self.registry,
        )  # fmt: skip
        self.cache_bytes = Gauge(
            "lambdaline_batch_cache_bytes", "encoded rows the served version's cache holds",
            registry=self.registry,
        )  # fmt: skip
        self.speed_watermark = Gauge(
            "lambdaline_speed_watermark_seconds", "speed-layer watermark, Unix time",
            registry=self.registry,
        )  # fmt: skip
        self.speed_rejected = Gauge(
            "lambdaline_speed_records_rejected",
            "speed-store records skipped as not rows of their view, since start",
            registry=self.registry,
        )


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


@router.get("/metrics", response_class=Response)
def metrics_endpoint(request: Request) -> Response:
    """Prometheus text format."""
    state = request.app.state
    metrics: Metrics = state.metrics
    version = state.batch_reader.version
    metrics.batch_version.set(version.version if version else -1)
    metrics.batch_horizon.set(version.horizon.timestamp() if version else 0)
    consumer = state.speed_consumer
    lag = consumer.lag if consumer is not None else None
    metrics.speed_lag.set(lag if lag is not None else -1)
    metrics.speed_consumer_up.set(consumer is not None and consumer.following)
    with state.batch_reader.snapshot() as snapshot:
        metrics.cache_bytes.set(snapshot.cache.bytes if snapshot is not None else 0)
    watermark = state.speed_tables.watermark
    metrics.speed_watermark.set(watermark.timestamp() if watermark else 0)
    metrics.speed_rejected.set(state.speed_tables.rejected)
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
