"""A bounded cache of encoded batch-only results, one per opened batch version.

A published version never changes, so what a query reads from it wholly below
its horizon (where the merge takes no speed rows) is a function of the query
alone. :class:`serving.batch_reader.BatchSnapshot` keeps one cache per version:
when ``CURRENT`` moves, the new snapshot starts empty and the old cache goes
with the old snapshot, so nothing is ever invalidated by hand and no response
can mix versions. (Druid caches its immutable segments' results the same way.)

Entries are the rows already encoded as JSON, so a hit costs neither DuckDB nor
the encoder. The budget is in bytes of encoded rows (``serving_cache_mb`` per
worker process); the least recently used entries go first, and one result may
take at most an eighth of the budget, so a single huge answer cannot empty it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Encoded:
    """A view's rows as a JSON array, how many there are, and whether the limit cut some off."""

    json: bytes
    count: int
    truncated: bool = False


class ResultCache:
    """Least-recently-used :class:`Encoded` results up to ``max_bytes`` (0: keeps nothing)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, Encoded] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Encoded | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: Hashable, value: Encoded) -> None:
        size = len(value.json)
        if not self.enabled or size > self.max_bytes // 8:
            return
        with self._lock:
            held = self._entries.pop(key, None)
            if held is not None:  # two requests missed at once: keep one copy
                self.bytes -= len(held.json)
            self._entries[key] = value
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.bytes -= len(evicted.json)
