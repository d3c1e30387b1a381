"""The speed job's decode: CPU per input record, in one local Spark session (a measurement,
not a test).

    .venv/bin/python benchmarks/decode_cost.py [--records 400000] [--runs 5]

``--records`` raw Kafka records as the soak's traffic has them (half entries, 45 %
exits, 5 % registrations, each valid), cached in the JVM; then, ``--runs`` times in
turn, two passes over them: ``decode``, ``decode_together`` and the projection the
speed job's operator reads of it (``operator_input``'s columns), and ``read``, the cached
records alone (a micro-batch's fixed cost). It reports µs of CPU per record (the Spark
JVM, from the kernel) of ``decode`` less ``read``: the median over the runs, and each.
Run it on two checkouts in turn to compare two decodes.
"""

from __future__ import annotations

import argparse
import random
import statistics
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lambdaline.bench.measure import cpu_seconds_of_tree
from shared.domain.events import (
    BoothId,
    EventId,
    LicensePlate,
    RegistrationId,
    Toll,
    TollEntry,
    TollExit,
    VehicleRegistration,
    encode_event,
)
from shared.domain.validation import decode_together
from shared.platform.spark_session import spark_session
from shared.settings import get_settings
from speed_layer.job import SPEED_SPARK_CONF
from speed_layer.operator import operator_input

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)


def records(count: int, seed: int = 7) -> list[tuple[bytes, bytes, str, int, int, datetime]]:
    """Raw records (key, value, topic, partition, offset, timestamp), valid, in the soak's mix."""
    topics = get_settings().topics
    rng = random.Random(seed)
    out = []
    for n in range(count):
        plate = LicensePlate(f"{rng.choice('ABCDEFGH')}{rng.randrange(10**6):06d}")
        at = T0 + timedelta(milliseconds=n)
        draw = rng.random()
        event: TollEntry | TollExit | VehicleRegistration
        if draw < 0.5:
            event = TollEntry(
                EventId(f"e-{n}"), BoothId(f"booth-{n % 10}"), at, plate, "NY", "Volvo",
                "XC90", rng.randrange(1, 6), round(rng.uniform(800, 4000), 1),
                Toll(Decimal(rng.randrange(100, 900)) / 100), f"tag-{n % 97}",
            )  # fmt: skip
            topic = topics.entries
        elif draw < 0.95:
            event = TollExit(EventId(f"x-{n}"), BoothId(f"booth-{n % 10}"), at, plate)
            topic = topics.exits
        else:
            event = VehicleRegistration(
                EventId(f"r-{n}"), RegistrationId(f"reg-{n}"), plate, rng.random() < 0.1, at
            )
            topic = topics.registrations
        out.append((plate.encode(), encode_event(event), topic, 0, n, at))
    return out


def cpu_of(frame: DataFrame, pid: int) -> float:
    before = cpu_seconds_of_tree(pid)
    frame.write.format("noop").mode("overwrite").save()
    return cpu_seconds_of_tree(pid) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    settings = get_settings()
    spark = spark_session(settings, "lambdaline-decode-cost", extra_config=SPEED_SPARK_CONF)
    pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    raw = spark.createDataFrame(records(args.records), schema).repartition(2).cache()
    raw.count()
    views = settings.views
    decoded = decode_together(raw, settings.topics, views.max_future_skew, views.dead_letter_bytes)
    rows = operator_input(decoded, timedelta(minutes=2), views.sizes)
    read = raw.select(F.length("value").alias("n"), "topic")
    per_record = []
    for run in range(args.runs + 1):
        decode_s, read_s = cpu_of(rows, pid), cpu_of(read, pid)
        if run == 0:
            continue  # the JIT's warm-up
        per_record.append((decode_s - read_s) * 1e6 / args.records)
        print(f"run {run}: {per_record[-1]:.2f} µs per record", flush=True)
    print(f"decode: median {statistics.median(per_record):.2f} µs of CPU per record")
    spark.stop()


if __name__ == "__main__":
    main()
