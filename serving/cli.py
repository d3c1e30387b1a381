"""``lambdaline serve``: the API under uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from shared.logs import configure_logging
from shared.settings import get_settings


def serve(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="processes, each with its own stores")] = 1,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs; /v1/* needs X-API-Key)."""
    configure_logging()
    settings = get_settings()
    if not settings.api_keys:
        typer.echo(
            "warning: LAMBDALINE_API_KEYS is empty, so every /v1 request gets 401; "
            "set it to a comma-separated list of keys",
            err=True,
        )
    uvicorn.run(
        "serving.main:create_app", factory=True, host=host, port=port, workers=workers,
        log_level="info",
    )  # fmt: skip
