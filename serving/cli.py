"""``lambdaline serve``: the API under uvicorn."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
import uvicorn

from serving.limits import BoundedHttpTools
from serving.metrics import MULTIPROCESS_DIR
from shared.platform.logs import configure_logging
from shared.settings import get_settings

SHUTDOWN_GRACE_S = 3
"""How long a stopping server waits for open connections before it cancels them: a
``GET /v1/stream`` never ends by itself, and uvicorn would otherwise wait for it for good
(its clients reconnect, to another worker or the next server)."""


def serve(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="processes, each with its own stores")] = 1,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs; /v1/* needs X-API-Key)."""
    configure_logging()
    settings = get_settings()
    if not settings.serving.api_keys:
        typer.echo(
            "warning: LAMBDALINE_API_KEYS is empty, so every /v1 request gets 401; "
            "set it to a comma-separated list of keys",
            err=True,
        )
    with _shared_metrics(workers):
        uvicorn.run(
            "serving.main:create_app", factory=True, host=host, port=port, workers=workers,
            log_level="info", timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            http=BoundedHttpTools,  # the URL and header limits, while the head is parsed
        )  # fmt: skip


@contextmanager
def _shared_metrics(workers: int) -> Iterator[None]:
    """With several workers, prometheus_client's multiprocess mode in a directory of this
    server's own (see ``serving.metrics``), removed when it stops; one given is used as is."""
    if workers == 1 or os.environ.get(MULTIPROCESS_DIR):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="lambdaline-metrics-") as directory:
        os.environ[MULTIPROCESS_DIR] = directory  # the workers, spawned later, inherit it
        try:
            yield
        finally:
            del os.environ[MULTIPROCESS_DIR]
