"""Reading the batch store: the version ``CURRENT`` names, swapped between requests.

A :class:`BatchReader` polls ``CURRENT`` (default every second) and opens a new
version read-only when the pointer moves (a new run or a rollback). A request
takes the snapshot current when it starts and holds it to the end, so no
response mixes two versions and an in-flight request finishes on the version it
started with; a replaced snapshot is closed when its last request lets go.
Each snapshot carries its own :class:`serving.result_cache.ResultCache`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from serving.result_cache import ResultCache
from shared.platform.batch_store import BatchVersion, read_current
from shared.platform.logs import log_event

logger = logging.getLogger("lambdaline.serving")


class BatchSnapshot:
    """One opened version, shared by the requests that started while it was current."""

    def __init__(
        self, store: Path, version: BatchVersion, cache_bytes: int = 0, threads: int | None = None
    ):
        self.version = version
        self.connection = duckdb.connect(
            str(store / version.path),
            read_only=True,
            config={"threads": threads} if threads else {},
        )
        self.cache = ResultCache(cache_bytes)
        """Batch-only results of this version (it never changes, so neither do they)."""
        self._users = 0
        self._retired = False
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            close = self._retired and self._users == 0
        if close:
            self.connection.close()

    def retire(self) -> None:
        with self._lock:
            self._retired = True
            close = self._users == 0
        if close:
            self.connection.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.connection.cursor()


class BatchReader:
    """Follows ``CURRENT`` and hands out the current snapshot."""

    def __init__(
        self, store: Path, poll_s: float = 1.0, cache_bytes: int = 0, threads: int | None = None
    ):
        self.store = store
        self.poll_s = poll_s
        self.cache_bytes = cache_bytes
        self.threads = threads
        """DuckDB threads of each opened version (None: DuckDB's default, one per core)."""
        self._current: BatchSnapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def refresh(self) -> None:
        """Open the version CURRENT names if it is not the one held."""
        try:
            pointer = read_current(self.store)
        except (OSError, ValueError, KeyError) as error:
            self._failed(f"cannot read {self.store / 'CURRENT'}: {error}")
            return
        held = self._current
        if pointer is None or (held is not None and held.version == pointer):
            self.error = None  # e.g. rolled back to the version held after a bad pointer
            return
        try:
            snapshot = BatchSnapshot(self.store, pointer, self.cache_bytes, self.threads)
        except duckdb.Error as error:
            self._failed(f"cannot open batch version {pointer.version}: {error}")
            return
        with self._lock:
            previous, self._current = self._current, snapshot
        self.error = None
        if previous is not None:
            previous.retire()
        log_event(
            logger, "batch_version_attached", version=pointer.version,
            horizon=pointer.horizon.isoformat(),
        )  # fmt: skip

    def _failed(self, message: str) -> None:
        """Keep serving what is held; say why once (the poll retries every poll_s)."""
        if message != self.error:
            log_event(logger, "batch_version_error", error=message)
        self.error = message

    @contextmanager
    def snapshot(self) -> Iterator[BatchSnapshot | None]:
        """The current snapshot (None if nothing is published), held for the caller's scope."""
        with self._lock:
            snapshot = self._current
            if snapshot is not None:
                snapshot.acquire()
        try:
            yield snapshot
        finally:
            if snapshot is not None:
                snapshot.release()

    @property
    def version(self) -> BatchVersion | None:
        held = self._current
        return held.version if held is not None else None

    def start(self) -> None:
        self.refresh()

        def follow() -> None:
            while not self._stop.wait(self.poll_s):
                self.refresh()

        self._thread = threading.Thread(target=follow, name="batch-reader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            held, self._current = self._current, None
        if held is not None:
            held.retire()
