"""The per-version result cache: least recently used out first, within a byte budget."""

from __future__ import annotations

from serving.result_cache import Encoded, ResultCache


def encoded(text: str) -> Encoded:
    return Encoded(text.encode(), 1)


def test_least_recently_used_entries_leave_first_and_the_budget_holds() -> None:
    cache = ResultCache(max_bytes=80)  # one entry may take 10 bytes
    for key in "abcdefgh":
        cache.put(key, encoded(key * 10))
    assert cache.bytes == 80 and len(cache) == 8
    assert cache.get("a") == encoded("a" * 10)  # "a" is now the most recently used
    cache.put("i", encoded("i" * 10))
    assert cache.get("b") is None  # the least recently used went
    assert cache.get("a") is not None and cache.get("i") is not None
    assert cache.bytes == 80
    assert (cache.hits, cache.misses) == (3, 1)


def test_a_result_larger_than_an_eighth_of_the_budget_is_not_kept() -> None:
    cache = ResultCache(max_bytes=80)
    cache.put("small", encoded("x" * 10))
    cache.put("large", encoded("y" * 11))
    assert cache.get("large") is None
    assert cache.get("small") is not None and cache.bytes == 10


def test_putting_a_key_twice_keeps_one_copy() -> None:
    cache = ResultCache(max_bytes=80)
    cache.put("k", encoded("first"))
    cache.put("k", encoded("again"))
    assert len(cache) == 1 and cache.bytes == 5 and cache.get("k") == encoded("again")


def test_a_zero_budget_is_a_cache_that_keeps_nothing() -> None:
    cache = ResultCache(max_bytes=0)
    cache.put("k", encoded(""))
    assert not cache.enabled and len(cache) == 0
