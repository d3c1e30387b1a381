"""One process at a time: an advisory lock file that names its holder.

A batch run holds ``<batch store>/run.lock``, a speed job
``<state_dir>/checkpoints/speed.lock``: two speed jobs on one checkpoint run the
same micro-batches and race to write its offset log, and Spark fails one of
their queries only later, mid-stream, with ``CONCURRENT_STREAM_LOG_UPDATE``. The lock is
``flock``: the kernel releases it when its holder dies, ``kill -9`` included,
so a stale file never blocks a restart. It guards one machine's processes; on a
cluster the scheduler (cron's one host, Kubernetes' ``concurrencyPolicy:
Forbid``) is what keeps a second run away.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class LockHeldError(Exception):
    """Another process holds the lock; the message names it, its pid and what to do."""


@contextmanager
def exclusive_lock(path: Path, holder: str, advice: str) -> Iterator[None]:
    """Hold ``path`` for this process, or raise :class:`LockHeldError` at once.

    ``holder`` says who would hold it (``"another batch run"``), ``advice``
    what to do about it; the holder's pid comes from the file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = handle.read().strip() or "unknown"
            raise LockHeldError(f"{holder} holds {path} (pid {pid}); {advice}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
