"""The benchmark's verdict on which steps the speed job kept up with."""

from __future__ import annotations

from typing import Any

from lambdaline.bench.measure import speed_verdict

TRIGGER_S, LOOKUP_TRIGGER_S = 1.0, 10.0


def step(
    offered: int,
    backlog: int,
    p99_s: float,
    lookup_backlog: int = 0,
    lookup_p99_s: float = 5.0,
    sent: int | None = None,
) -> dict[str, Any]:
    """A step that sent `sent` records/s (default: 80 % of those offered), half of them entries."""
    sent = int(offered * 0.8) if sent is None else sent
    return {
        "offered_records_per_s": offered,
        "sent_records_per_s": {"all": sent, "toll.entries": sent // 2},
        "entries_backlog_at_end": backlog,
        "microbatch_s": {"p50": p99_s / 2, "p99": p99_s},
        "lookups": {
            "records_backlog_at_end": lookup_backlog,
            "microbatch_s": {"p50": lookup_p99_s / 2, "p99": lookup_p99_s},
        },
    }


def verdict(steps: list[dict[str, Any]]) -> dict[str, dict[str, int] | None]:
    return speed_verdict(steps, TRIGGER_S, LOOKUP_TRIGGER_S)


def at(offered: int, sent: int) -> dict[str, int]:
    return {"offered_records_per_s": offered, "sent_records_per_s": sent}


def test_kept_up_means_less_than_a_second_of_the_entries_sent_unread() -> None:
    # the step named 2,000 sent 1,600 records/s, 800 of them entries: 799 unread keep up,
    # 800 do not (though 800 is less than a second of the 2,000 / 2 offered)
    kept_up = verdict([step(1000, 0, 8.0), step(2000, 799, 8.0)])["kept_up"]
    assert kept_up == at(2000, 1600)
    kept_up = verdict([step(1000, 0, 8.0), step(2000, 800, 8.0)])["kept_up"]
    assert kept_up == at(1000, 800)


def test_the_lookups_may_be_at_most_one_lookup_trigger_of_the_records_sent_behind() -> None:
    # 1,600 records/s sent, 10-s lookup trigger: 15,999 unread records keep up, 16,000 not
    steps = [step(1000, 0, 8.0), step(2000, 0, 8.0, lookup_backlog=15_999)]
    assert verdict(steps)["kept_up"] == at(2000, 1600)
    steps = [step(1000, 0, 8.0), step(2000, 0, 8.0, lookup_backlog=16_000)]
    assert verdict(steps)["kept_up"] == at(1000, 800)


def test_the_verdict_is_the_step_that_sent_the_most() -> None:
    # a step offering more may send less (the generator falls short on a busy machine)
    steps = [step(3000, 0, 8.0, sent=2400), step(4000, 0, 8.0, sent=2300)]
    assert verdict(steps)["kept_up"] == at(3000, 2400)


def test_sustainable_also_needs_microbatches_within_the_trigger() -> None:
    steps = [step(500, 0, 0.9), step(1000, 0, 1.0), step(3000, 0, 1.5), step(5000, 9000, 0.5)]
    assert verdict(steps) == {"kept_up": at(3000, 2400), "sustainable": at(1000, 800)}


def test_sustainable_needs_the_lookups_within_their_trigger_too() -> None:
    steps = [step(500, 0, 0.9, lookup_p99_s=10.0), step(1000, 0, 0.9, lookup_p99_s=10.5)]
    assert verdict(steps) == {"kept_up": at(1000, 800), "sustainable": at(500, 400)}


def test_no_step_kept_up() -> None:
    assert verdict([step(3000, 5000, 0.5)]) == {"kept_up": None, "sustainable": None}
