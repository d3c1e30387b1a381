"""expired_registrations: entries whose latest registration at entry time had expired,
and the registration rule it is decided by."""

from __future__ import annotations

from datetime import timedelta

from shared.domain.views.declarations import AT, BestMatchRule, Offset, best_match_view
from shared.domain.views.rules import sql_interval
from shared.domain.views.spec import (
    Aggregate,
    Candidates,
    Column,
    ColumnType,
    Combine,
    Final,
    ViewSpec,
)
from shared.domain.views.view import ReferenceTable, Size, ViewSizes

REGISTRATION_LOOKBACK = Size(
    "registration_lookback",
    timedelta(days=400),
    "how long a registration applies: an entry uses its plate's latest registration "
    "recorded at most this long before it",
)

SPEC = ViewSpec(
    name="expired_registrations",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("license_plate", ColumnType.TEXT),
        Column("entry_time", ColumnType.INSTANT),
        Column("registration_id", ColumnType.TEXT),
    ),
    key=("booth_id", "license_plate", "entry_time"),
    time_column="entry_time",
    api_row="ExpiredRegistrationRow",
    # a registration recorded at or before the entry is no later than the entry:
    # once the watermark passes the entry, none can still arrive
    final=Final("entry_time"),
    # every registration of the plate at or before the entry is a candidate; the
    # latest decides, and it is an alert only if that registration had expired
    combine=Combine.BEST_CANDIDATE,
    candidates=Candidates(
        rank=("registration_time", "registration_id", "registration_event_id"),
        best=Aggregate.MAX,
        hidden=(
            Column("registration_time", ColumnType.INSTANT),
            Column("registration_event_id", ColumnType.TEXT),
            Column("expired", ColumnType.FLAG),
        ),
        shown_if="expired",
    ),
)

RULE = BestMatchRule(
    left="toll_entry",
    right="vehicle_registration",
    keys=("license_plate",),
    left_time="entry_time",
    right_time="registration_time",
    start=Offset(REGISTRATION_LOOKBACK, before=True),
    end=AT,
    carries={
        "registration_time": "registration_time",
        "registration_id": "registration_id",
        "registration_event_id": "event_id",
        "expired": "expired",
    },
    missing="missing_registration",
)
"""The registration rule: each entry's latest registration of its plate recorded in
[entry_time - registration_lookback, entry_time] (a registration older than that no longer
counts), greatest by (registration_time, registration_id, event_id): the spec's rank. The
entry is a row if that registration had expired (the rank's ``shown_if``)."""


def _at_entry_sql(sizes: ViewSizes) -> str:
    """The registration rule in DuckDB SQL: per entry, of its plate's registrations
    recorded in the ``registration_lookback`` up to it, the greatest by
    (registration_time, registration_id, event_id); none: NULLs."""
    lookback = sql_interval(sizes[REGISTRATION_LOOKBACK.name])
    return f"""
        SELECT e.event_id, e.booth_id, e.license_plate, e.entry_time,
               arg_max(r.registration_id, (r.registration_time, r.registration_id, r.event_id))
                   AS registration_id,
               arg_max(r.expired, (r.registration_time, r.registration_id, r.event_id))
                   AS expired
        FROM once_entries e LEFT JOIN registrations r
          ON r.license_plate = e.license_plate AND r.registration_time <= e.entry_time
         AND r.registration_time >= e.entry_time - {lookback}
        GROUP BY e.event_id, e.booth_id, e.license_plate, e.entry_time
    """


AT_ENTRY = ReferenceTable("at_entry", _at_entry_sql)
"""The registration rule's table in the reference SQL, which diagnostics reads too."""

VIEW = best_match_view(
    SPEC,
    RULE,
    lambda sizes: (
        """
        SELECT booth_id, license_plate, entry_time, registration_id FROM at_entry WHERE expired
    """
    ),
    reference_tables=(AT_ENTRY,),
)
