"""Cron expressions as crontab, a Kubernetes CronJob and Airflow read them.

``croniter`` accepts more than they do: a sixth and seventh field (seconds,
then year). Someone used to Quartz or Spring writes ``0 0 2 * * *`` for "02:00
every day", with the seconds first; croniter reads it as "every second of
00:00 on the 2nd of each month", and the crontab line and CronJob in
``deploy/`` would refuse it. So a schedule here is five fields (or an alias
such as ``@daily``), and an expression that is wrong says which field is.
"""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import CroniterBadDateError, croniter

FIELDS: tuple[tuple[str, str], ...] = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat"),
)


def check_cron(expression: str) -> str:
    """``expression`` if it is five cron fields (or an alias) naming some time; else ValueError."""
    fields = expression.split()
    if len(fields) == 1 and expression.strip().startswith("@"):
        if croniter.is_valid(expression.strip()):
            return expression
        aliases = "@hourly, @daily, @weekly, @monthly, @yearly"
        raise ValueError(f"{expression!r} is not a cron alias ({aliases})")
    if len(fields) != len(FIELDS):
        names = " ".join(name for name, _ in FIELDS)
        raise ValueError(
            f"{expression!r} has {len(fields)} fields; a cron expression has five ({names}), "
            "with no seconds field, as crontab and a Kubernetes CronJob read it"
        )
    for position, (name, allowed) in enumerate(FIELDS):
        alone = ["*"] * len(FIELDS)
        alone[position] = fields[position]
        if not croniter.is_valid(" ".join(alone)):
            raise ValueError(
                f"{expression!r} is not a cron expression: its {name} field "
                f"{fields[position]!r} is not valid ({allowed})"
            )
    if not croniter.is_valid(expression):  # each field alone is fine, together they are not
        raise ValueError(f"{expression!r} is not a cron expression")
    try:
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(f"{expression!r} names no date that exists (e.g. February 30)") from None
    return expression
