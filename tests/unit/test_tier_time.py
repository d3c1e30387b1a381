"""The fast tier's time: the inner loop stays a few minutes (``make test-fast``).

This reads what the last fast run recorded (``tests.conftest.FAST_TIER_RECORD``),
so it runs in the slow tier, after it: ``make test`` runs the fast tier first.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.conftest import FAST_TIER_RECORD

pytestmark = pytest.mark.fast_tier_time

LIMIT_S = 240
"""Four minutes: the three the tier is meant to take, and room for a slower machine."""


def test_the_last_fast_tier_ran_within_four_minutes(request: pytest.FixtureRequest) -> None:
    record = request.config.cache.get(FAST_TIER_RECORD, None)
    assert record is not None, (
        "no fast tier run is recorded in .pytest_cache: run `make test-fast` first "
        "(`make test` does)"
    )
    finished = datetime.fromisoformat(record["finished_at"])
    assert record["seconds"] <= LIMIT_S, (
        f"`make test-fast` took {record['seconds']:.0f} s ({record['tests']} tests, finished "
        f"{finished:%Y-%m-%d %H:%M} UTC), more than {LIMIT_S} s: find the slow tests with "
        "`pytest --tier fast --durations=20`"
    )
