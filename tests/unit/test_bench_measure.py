"""The benchmark's verdict on which offered rates the speed job kept up with."""

from __future__ import annotations

from typing import Any

from lambdaline.bench.measure import speed_verdict


def step(offered: int, backlog: int, p99_s: float) -> dict[str, Any]:
    return {
        "offered_records_per_s": offered,
        "entries_backlog_at_end": backlog,
        "microbatch_s": {"p50": p99_s / 2, "p99": p99_s},
    }


def test_kept_up_means_less_than_a_second_of_entries_unread() -> None:
    # 2,000 records/s at 2 records per entry is 1,000 entries/s: 999 unread keeps up, 1,000 not
    verdict = speed_verdict([step(1000, 0, 8.0), step(2000, 999, 8.0)], 1.0, 2.0)
    assert verdict["kept_up_records_per_s"] == 2000
    verdict = speed_verdict([step(1000, 0, 8.0), step(2000, 1000, 8.0)], 1.0, 2.0)
    assert verdict["kept_up_records_per_s"] == 1000


def test_sustainable_also_needs_microbatches_within_the_trigger() -> None:
    steps = [step(500, 0, 0.9), step(1000, 0, 1.0), step(3000, 0, 1.5), step(5000, 9000, 0.5)]
    verdict = speed_verdict(steps, 1.0, 2.05)
    assert verdict == {"kept_up_records_per_s": 3000, "sustainable_records_per_s": 1000}


def test_no_step_kept_up() -> None:
    verdict = speed_verdict([step(3000, 5000, 0.5)], 1.0, 2.05)
    assert verdict == {"kept_up_records_per_s": None, "sustainable_records_per_s": None}
