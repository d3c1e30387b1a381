"""Structured log lines: one JSON object per line, an ``event`` name and its fields.

Long-running jobs (the speed job, batch runs) log with :func:`log_event`, so a
line can be grepped by eye and parsed by a log pipeline alike.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO


def configure_logging(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send lambdaline's loggers to stderr (or ``stream``), one plain line per JSON message."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("lambdaline")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def log_event(logger: logging.Logger, event: str, **fields: Any) -> None:
    line = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event, **fields}
    logger.info(json.dumps(line, default=str, ensure_ascii=False))
