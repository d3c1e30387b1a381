"""The benchmark's verdict on which offered rates the speed job kept up with."""

from __future__ import annotations

from typing import Any

from lambdaline.bench.measure import speed_verdict

TRIGGER_S, LOOKUP_TRIGGER_S = 1.0, 10.0


def step(
    offered: int, backlog: int, p99_s: float, lookup_backlog: int = 0, lookup_p99_s: float = 5.0
) -> dict[str, Any]:
    return {
        "offered_records_per_s": offered,
        "entries_backlog_at_end": backlog,
        "microbatch_s": {"p50": p99_s / 2, "p99": p99_s},
        "lookups": {
            "records_backlog_at_end": lookup_backlog,
            "microbatch_s": {"p50": lookup_p99_s / 2, "p99": lookup_p99_s},
        },
    }


def verdict(steps: list[dict[str, Any]], records_per_entry: float = 2.05) -> dict[str, int | None]:
    return speed_verdict(steps, TRIGGER_S, LOOKUP_TRIGGER_S, records_per_entry)


def test_kept_up_means_less_than_a_second_of_entries_unread() -> None:
    # 2,000 records/s at 2 records per entry is 1,000 entries/s: 999 unread keeps up, 1,000 not
    kept_up = verdict([step(1000, 0, 8.0), step(2000, 999, 8.0)], 2.0)["kept_up_records_per_s"]
    assert kept_up == 2000
    kept_up = verdict([step(1000, 0, 8.0), step(2000, 1000, 8.0)], 2.0)["kept_up_records_per_s"]
    assert kept_up == 1000


def test_the_lookups_may_be_at_most_one_lookup_trigger_behind() -> None:
    # 2,000 records/s offered, 10-s lookup trigger: 19,999 unread records keep up, 20,000 not
    steps = [step(1000, 0, 8.0), step(2000, 0, 8.0, lookup_backlog=19_999)]
    assert verdict(steps)["kept_up_records_per_s"] == 2000
    steps = [step(1000, 0, 8.0), step(2000, 0, 8.0, lookup_backlog=20_000)]
    assert verdict(steps)["kept_up_records_per_s"] == 1000


def test_sustainable_also_needs_microbatches_within_the_trigger() -> None:
    steps = [step(500, 0, 0.9), step(1000, 0, 1.0), step(3000, 0, 1.5), step(5000, 9000, 0.5)]
    assert verdict(steps) == {"kept_up_records_per_s": 3000, "sustainable_records_per_s": 1000}


def test_sustainable_needs_the_lookups_within_their_trigger_too() -> None:
    steps = [step(500, 0, 0.9, lookup_p99_s=10.0), step(1000, 0, 0.9, lookup_p99_s=10.5)]
    assert verdict(steps) == {"kept_up_records_per_s": 1000, "sustainable_records_per_s": 500}


def test_no_step_kept_up() -> None:
    verdict_ = verdict([step(3000, 5000, 0.5)])
    assert verdict_ == {"kept_up_records_per_s": None, "sustainable_records_per_s": None}
