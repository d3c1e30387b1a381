"""Speed layer == the shared view functions on the same events as a static DataFrame.

The input has no lateness beyond the watermark (the generator's late fraction is
zero). Closing events a day after the data push every watermark past it, so
every row the speed layer will ever emit for the data is final (and every visit
of the data closed); the rows of the closing booth and plate are left out of the
comparison.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lambdaline.generator import GeneratorConfig, send_to_kafka
from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION
from shared.domain.validation import decode_records
from shared.domain.views import VIEW_MODULES
from shared.domain.views.rules import without_duplicates
from shared.domain.views.view import Inputs
from shared.settings import Settings
from shared.settings.views import REGISTERED, VIEW_BY_NAME
from speed_layer import job
from speed_layer.speed_store import JSON_OPTIONS
from tests.integration.helpers import (
    CLOSING_BOOTH,
    CLOSING_PLATE,
    close_the_day,
    isolated_settings,
    speed_view,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def as_speed_rows(frame: DataFrame, view: str) -> dict[str, dict[str, Any]]:
    """Static view rows in the speed store's shape: keyed by the JSON of the view key."""
    keyed = frame.select(
        F.to_json(F.struct(*VIEW_BY_NAME[view].key), JSON_OPTIONS).alias("key"),
        F.to_json(F.struct(*frame.columns), JSON_OPTIONS).alias("value"),
    )
    return {row.key: json.loads(row.value, parse_float=Decimal) for row in keyed.collect()}


def without_closing(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows, without their ``version``, but those of the closing booth or plate."""
    return {
        key: {name: value for name, value in row.items() if name != "version"}
        for key, row in rows.items()
        if row.get("booth_id") != CLOSING_BOOTH and row.get("license_plate") != CLOSING_PLATE
    }


def test_speed_views_equal_the_static_view_functions(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    config = GeneratorConfig(
        events=1500, seed=3, plates=300, late=0.0, malformed=0.02, duplicate=0.02,
        start=datetime(2026, 1, 5, 6, tzinfo=UTC),
    )  # fmt: skip
    send_to_kafka(config, settings, workers=1)
    close_the_day(settings)

    job.run(spark, settings, available_now=True)

    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap)
        .option("subscribe", ",".join(settings.topics.inputs()))
        .option("startingOffsets", "earliest")
        .load()
    )
    decoded = decode_records(
        raw, settings.topics, settings.views.max_future_skew, settings.views.dead_letter_bytes
    )
    entries = without_duplicates(decoded.of(TOLL_ENTRY)).cache()
    exits = without_duplicates(decoded.of(TOLL_EXIT)).cache()
    registrations = without_duplicates(decoded.of(VEHICLE_REGISTRATION)).cache()
    sizes = settings.views.sizes
    inputs = Inputs(entries, exits, registrations)
    by_name = {view.name: view for view in REGISTERED}
    truth = {
        name: by_name[name].compute(inputs, sizes)
        for name in (module.rsplit(".", 1)[1] for module in VIEW_MODULES)
    }
    for view, frame in truth.items():
        expected = without_closing(as_speed_rows(frame, view))
        actual = without_closing(speed_view(settings, view))
        assert expected, f"{view}: the input should produce rows"
        assert actual == expected, view
