"""One declaration per view: the stores' tables, the speed record and the API row come from it.

A view with one column more (``max_toll``, rolled up by its maximum) is declared
here as a spec and nowhere else; each shape below is derived from that spec,
and what it must be is written out by hand.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import duckdb
import pytest
from pyspark.sql import SparkSession

from serving.models import response_model, row_model
from serving.queries import ViewQuery
from shared.domain.merge import Source, roll_up
from shared.domain.views import compute_views
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.domain.views.spec import Aggregate, Column, ColumnType, Final, RollUp, ViewSpec
from shared.domain.views.view import Inputs
from shared.platform.batch_store import StoreTable
from shared.platform.speed_tables import _speed_ddl
from shared.settings import Settings
from shared.settings.views import REGISTERED, VIEWS
from speed_layer.speed_store import speed_records

assert BOOTH_STATS.roll_up is not None
WITH_MAX_TOLL = dataclasses.replace(
    BOOTH_STATS,
    columns=(*BOOTH_STATS.columns, Column("max_toll", ColumnType.MONEY, "the highest toll")),
    roll_up=RollUp(
        start="window_start",
        end="window_end",
        values={**BOOTH_STATS.roll_up.values, "max_toll": Aggregate.MAX},
    ),
)


def test_the_batch_store_table_has_the_new_column_typed_and_not_null() -> None:
    table = StoreTable.of(WITH_MAX_TOLL)
    with duckdb.connect() as connection:
        connection.execute(table.ddl())
        described = connection.execute('DESCRIBE "booth_stats"').fetchall()
    assert [(name, sql_type, null) for name, sql_type, null, *_ in described] == [
        ("booth_id", "VARCHAR", "NO"),
        ("window_start", "TIMESTAMP", "NO"),
        ("window_end", "TIMESTAMP", "NO"),
        ("vehicle_count", "BIGINT", "NO"),
        ("total_toll", "DECIMAL(18,2)", "NO"),
        ("first_entry_time", "TIMESTAMP", "NO"),
        ("last_entry_time", "TIMESTAMP", "NO"),
        ("max_toll", "DECIMAL(18,2)", "NO"),
    ]


def test_both_stores_keep_rows_in_the_view_key_order() -> None:
    table = StoreTable.of(WITH_MAX_TOLL)
    assert table.key == ("booth_id", "window_start")
    assert table.date_column == "window_start"
    assert _speed_ddl(WITH_MAX_TOLL).endswith(
        '"max_toll" DECIMAL(18,2) NOT NULL, "version" BIGINT NOT NULL, '
        'PRIMARY KEY ("booth_id", "window_start"))'
    )


def test_the_speed_record_carries_the_new_column_keyed_by_the_view_key(
    spark: SparkSession,
) -> None:
    rows = spark.createDataFrame(
        [("B01", datetime(2026, 1, 5, 6, 0), datetime(2026, 1, 5, 6, 5), 2, Decimal("3.50"),
          datetime(2026, 1, 5, 6, 1), datetime(2026, 1, 5, 6, 4), Decimal("2.25"))],
        "booth_id string, window_start timestamp, window_end timestamp, vehicle_count long, "
        "total_toll decimal(18,2), first_entry_time timestamp, last_entry_time timestamp, "
        "max_toll decimal(18,2)",
    )  # fmt: skip
    [record] = speed_records(WITH_MAX_TOLL, rows, 7).collect()
    assert json.loads(record.key) == {"booth_id": "B01", "window_start": "2026-01-05T06:00:00.000Z"}
    assert json.loads(record.value, parse_float=Decimal) == {
        "booth_id": "B01",
        "window_start": "2026-01-05T06:00:00.000Z",
        "window_end": "2026-01-05T06:05:00.000Z",
        "vehicle_count": 2,
        "total_toll": Decimal("3.50"),
        "first_entry_time": "2026-01-05T06:01:00.000Z",
        "last_entry_time": "2026-01-05T06:04:00.000Z",
        "max_toll": Decimal("2.25"),
        "version": 7,
    }


def test_the_api_row_has_the_new_column_with_its_type_and_description() -> None:
    model = row_model(WITH_MAX_TOLL)
    schema = model.model_json_schema()
    assert model.__name__ == "BoothStatsRow"
    assert list(schema["properties"]) == [
        "booth_id", "window_start", "window_end", "vehicle_count", "total_toll",
        "first_entry_time", "last_entry_time", "max_toll", "final", "source",
    ]  # fmt: skip
    assert schema["properties"]["max_toll"]["description"] == "the highest toll"
    row = model.model_validate(
        {"booth_id": "B01", "window_start": "2026-01-05T06:00:00Z",
         "window_end": "2026-01-05T06:05:00Z", "vehicle_count": 2, "total_toll": "3.50",
         "first_entry_time": "2026-01-05T06:01:00Z", "last_entry_time": "2026-01-05T06:04:00Z",
         "max_toll": "2.25", "final": False, "source": "speed"}
    )  # fmt: skip
    assert json.loads(row.model_dump_json())["max_toll"] == "2.25"
    with pytest.raises(ValueError, match="max_toll"):
        model.model_validate({**row.model_dump(), "max_toll": "a lot"})


def test_one_response_model_per_view_whatever_asks_for_it() -> None:
    assert response_model(BOOTH_STATS) is response_model(BOOTH_STATS)
    assert response_model(BOOTH_STATS).__name__ == "ViewResponse[BoothStatsRow]"


def test_the_new_column_rolls_up_in_sql_and_in_the_merge_alike() -> None:
    """Two 5-minute rows of one hour: the hour's max_toll is the larger, in both paths."""
    rows = [
        ("B01", datetime(2026, 1, 5, 6, 0), datetime(2026, 1, 5, 6, 5), 2, Decimal("3.50"),
         datetime(2026, 1, 5, 6, 1), datetime(2026, 1, 5, 6, 4), Decimal("2.25")),
        ("B01", datetime(2026, 1, 5, 6, 5), datetime(2026, 1, 5, 6, 10), 1, Decimal("4.00"),
         datetime(2026, 1, 5, 6, 7), datetime(2026, 1, 5, 6, 7), Decimal("4.00")),
    ]  # fmt: skip
    query = ViewQuery(
        WITH_MAX_TOLL, datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC), {}
    )
    with duckdb.connect() as connection:
        connection.execute(StoreTable.of(WITH_MAX_TOLL).ddl())
        connection.executemany('INSERT INTO "booth_stats" VALUES (?, ?, ?, ?, ?, ?, ?, ?)', rows)
        text, params = query.rolled_up_sql(Source.SPEED, None, timedelta(hours=1))
        [bucket] = connection.execute(text, params).fetchall()
    assert bucket == (
        "B01", datetime(2026, 1, 5, 6, 0), 3, Decimal("7.50"),
        datetime(2026, 1, 5, 6, 1), datetime(2026, 1, 5, 6, 7), Decimal("4.00"),
        False,  # no speed watermark yet: not final
    )  # fmt: skip
    typed = [
        {
            **dict(zip(WITH_MAX_TOLL.column_names, row, strict=True)),
            "final": False,
            "source": "speed",
        }
        for row in rows
    ]
    [merged] = roll_up(WITH_MAX_TOLL, typed, timedelta(hours=1))
    assert (merged["vehicle_count"], merged["total_toll"], merged["max_toll"]) == (
        3, Decimal("7.50"), Decimal("4.00"),
    )  # fmt: skip
    assert merged["window_end"] == datetime(2026, 1, 5, 7, 0)


def test_a_spec_naming_a_column_it_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="no column or a repeated one"):
        ViewSpec(
            "v", (Column("a", ColumnType.TEXT),), key=("b",), time_column="a", api_row="R",
            final=Final("a"),
        )  # fmt: skip


def test_each_view_function_yields_the_columns_its_spec_declares(spark: SparkSession) -> None:
    """The spec and the view function are the two places a column is written."""
    nothing = spark.createDataFrame([], "event_id string")
    entries = spark.createDataFrame(
        [], "event_id string, booth_id string, entry_time timestamp, license_plate string, "
        "toll decimal(12,2)",
    )  # fmt: skip
    exits = spark.createDataFrame([], "booth_id string, license_plate string, exit_time timestamp")
    registrations = nothing.selectExpr(
        "'' AS license_plate", "CAST(NULL AS timestamp) AS registration_time",
        "'' AS registration_id", "true AS expired", "event_id",
    )  # fmt: skip
    views = compute_views(REGISTERED, Inputs(entries, exits, registrations), Settings().views.sizes)
    columns = {name: tuple(frame.columns) for name, frame in views.items()}
    spark.catalog.clearCache()  # Inputs.shared persists the views' shared parts
    assert columns == {view.name: view.column_names for view in VIEWS}
