"""Environment variables set for a while, for the processes started meanwhile."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def temporary_environment(values: Mapping[str, str]) -> Iterator[None]:
    """These environment variables for the duration, then as they were (so the
    processes this one starts later do not inherit them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
