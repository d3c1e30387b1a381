"""Cron expressions: five fields as crontab reads them, and a message naming what is wrong."""

from __future__ import annotations

import pytest

from shared.settings.cron import check_cron


@pytest.mark.parametrize(
    "expression",
    ["0 2 * * *", "*/15 * * * *", "0 2 * * mon-fri", "30 1 1 jan *", "0 2 29 2 *", "@daily"],
)
def test_crontab_expressions_pass(expression: str) -> None:
    assert check_cron(expression) == expression


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 25 * * *", "'0 25 * * *' is not a cron expression: its hour field '25' is not valid (0-23)"),
        ("61 2 * * *", "'61 2 * * *' is not a cron expression: its minute field '61' is not valid (0-59)"),
        ("0 2 * 13 *", "'0 2 * 13 *' is not a cron expression: its month field '13' is not valid (1-12 or jan-dec)"),
        ("0 2 * * 8", "'0 2 * * 8' is not a cron expression: its day-of-week field '8' is not valid (0-7 or sun-sat)"),
        ("*/0 * * * *", "'*/0 * * * *' is not a cron expression: its minute field '*/0' is not valid (0-59)"),
        ("0 2 31 2 *", "'0 2 31 2 *' names no date that exists (e.g. February 30)"),
        ("@nightly", "'@nightly' is not a cron alias (@hourly, @daily, @weekly, @monthly, @yearly)"),
    ],
)  # fmt: skip
def test_a_wrong_field_is_named(expression: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_cron(expression)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("expression", "count"), [("0 0 2 * * *", 6), ("0 2 * *", 4), ("nightly", 1)]
)
def test_only_five_fields_are_a_schedule(expression: str, count: int) -> None:
    # croniter alone takes "0 0 2 * * *" (Quartz's 02:00 daily, seconds first) as every
    # second of 00:00 on the 2nd of each month
    with pytest.raises(ValueError) as raised:
        check_cron(expression)
    assert str(raised.value) == (
        f"{expression!r} has {count} fields; a cron expression has five (minute hour "
        "day-of-month month day-of-week), with no seconds field, as crontab and a "
        "Kubernetes CronJob read it"
    )
