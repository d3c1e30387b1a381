"""Reading the batch store: the version ``CURRENT`` names, swapped between requests.

A :class:`BatchReader` polls ``CURRENT`` (default every second) and opens a new
version read-only when the pointer moves (a new run or a rollback). A request
takes the snapshot current when it starts and holds it to the end, so no
response mixes two versions and an in-flight request finishes on the version it
started with; a replaced snapshot is closed when its last request lets go.
Each snapshot carries its own :class:`serving.result_cache.ResultCache`.

A request may ask for another kept version (``version=``): it is opened on
demand and the last ``OLDER_OPEN`` of them stay open; a version ``batch
rollback`` withdrew is refused (``ROLLED_BACK``), as is one no longer kept.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from serving.result_cache import ResultCache
from shared.platform.batch_store import (
    MANIFEST_TABLE,
    BatchVersion,
    read_current,
    read_rolled_back,
    version_file,
    version_numbers,
)
from shared.platform.logs import log_event

logger = logging.getLogger("lambdaline.serving")

OLDER_OPEN = 2
"""Versions other than the current one kept open for ``version=`` requests."""


class VersionRefusedError(Exception):
    """A ``version=`` the store cannot serve: ``status`` 404 (not kept) or 410 (rolled back)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class BatchSnapshot:
    """One opened version, shared by the requests that started while it was current."""

    def __init__(
        self,
        store: Path,
        version: BatchVersion | int,
        cache_bytes: int = 0,
        threads: int | None = None,
    ):
        """``version``: as ``CURRENT`` names it, or a number (the file's own manifest is read)."""
        path = version_file(store, version) if isinstance(version, int) else store / version.path
        self.path = path
        self.connection = duckdb.connect(
            str(path), read_only=True, config={"threads": threads} if threads else {}
        )
        if isinstance(version, int):
            try:  # through this connection: DuckDB refuses a second one of other settings
                [(manifest,)] = self.connection.execute(
                    f"SELECT manifest FROM {MANIFEST_TABLE}"
                ).fetchall()
            except BaseException:
                self.connection.close()
                raise
            version = BatchVersion.from_json(str(manifest))
        self.version = version
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
            self._close()

    def retire(self) -> None:
        with self._lock:
            self._retired = True
            close = self._users == 0
        if close:
            self._close()

    def _close(self) -> None:
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
        self._older: OrderedDict[int, BatchSnapshot] = OrderedDict()
        """Other versions opened for ``version=``, least recently used first."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.published: int | None = None
        """The version ``CURRENT`` named at the last poll (None: none, or not read yet)."""

    def refresh(self) -> None:
        """Open the version CURRENT names if it is not the one held."""
        try:
            pointer = read_current(self.store)
        except (OSError, ValueError, KeyError) as error:
            self._failed(f"cannot read {self.store / 'CURRENT'}: {error}")
            return
        self.published = pointer.version if pointer is not None else None
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

    def acquire(self, version: int | None = None) -> BatchSnapshot | None:
        """The current snapshot (None if nothing is published), or the kept ``version``,
        held until :meth:`BatchSnapshot.release`; raises :class:`VersionRefusedError` for
        a version not kept or rolled back."""
        if version is not None:
            return self._acquire_version(version)
        with self._lock:
            snapshot = self._current
            if snapshot is not None:
                snapshot.acquire()
        return snapshot

    @contextmanager
    def snapshot(self, version: int | None = None) -> Iterator[BatchSnapshot | None]:
        """:meth:`acquire`, held for the caller's scope."""
        snapshot = self.acquire(version)
        try:
            yield snapshot
        finally:
            if snapshot is not None:
                snapshot.release()

    def _acquire_version(self, number: int) -> BatchSnapshot:
        with self._lock:
            held = self._current
            if held is not None and held.version.version == number:
                held.acquire()
                return held
        if number in read_rolled_back(self.store):
            raise VersionRefusedError(410, f"batch version {number} was rolled back: not served")
        with self._lock:
            snapshot = self._older.get(number)
            if snapshot is not None:
                self._older.move_to_end(number)
                snapshot.acquire()
                return snapshot
        try:
            opened = BatchSnapshot(self.store, number, self.cache_bytes, self.threads)
        except (duckdb.Error, OSError):
            if version_file(self.store, number).exists():
                raise
            kept = ", ".join(map(str, version_numbers(self.store))) or "none"
            raise VersionRefusedError(
                404, f"batch version {number} is not kept (kept: {kept})"
            ) from None
        retired = []
        with self._lock:
            snapshot = self._older.setdefault(number, opened)
            self._older.move_to_end(number)
            if snapshot is not opened:  # another request opened it meanwhile
                retired.append(opened)
            while len(self._older) > OLDER_OPEN:
                retired.append(self._older.popitem(last=False)[1])
            snapshot.acquire()
        for unused in retired:
            unused.retire()
        return snapshot

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
            older, self._older = list(self._older.values()), OrderedDict()
        for snapshot in [*older, held]:
            if snapshot is not None:
                snapshot.retire()
