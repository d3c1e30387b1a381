"""The API's speed-store upsert, with and without the changed rows returned (a measurement,
not a test).

    .venv/bin/python benchmarks/speed_store_apply.py [--records N] [--keys K] [--poll 5000]

``SpeedTables.apply`` (the upsert alone) against ``apply_changed`` (the same upsert
returning each changed row's wire JSON, what ``GET /v1/stream`` sends), over N
``booth_stats`` records in polls of the consumer's size, in one thread: the best of
three runs of each, per record. ``--keys``: how many view keys the records update
(default 2000, so most records replace a held row; as many as ``--records``: every
record a new row, as a day's trips and alerts are).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timedelta

from shared.platform.speed_tables import SpeedTables


def record(n: int, batch_id: int, keys: int) -> tuple[bytes, bytes]:
    start = datetime(2026, 1, 6) + timedelta(minutes=5 * (n % keys // 10))

    def instant(moment: datetime) -> str:
        return f"{moment.isoformat()}.000Z"

    value = {
        "booth_id": f"b{n % 10}", "window_start": instant(start),
        "window_end": instant(start + timedelta(minutes=5)), "vehicle_count": n,
        "total_toll": 2.5, "first_entry_time": instant(start), "last_entry_time": instant(start),
        "version": batch_id,
    }  # fmt: skip
    return f"b{n % 10}|{start.isoformat()}".encode(), json.dumps(value).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=2_000)
    parser.add_argument("--poll", type=int, default=5_000)
    args = parser.parse_args()
    polls = [
        [record(n, batch_id, args.keys) for n in range(start, min(start + args.poll, args.records))]
        for batch_id, start in enumerate(range(0, args.records, args.poll))
    ]
    for method in ("apply", "apply_changed"):
        best = float("inf")
        for _ in range(3):
            tables = SpeedTables(1)
            started = time.perf_counter()
            for records in polls:
                getattr(tables, method)("booth_stats", records)
            best = min(best, time.perf_counter() - started)
            tables.close()
        print(f"{method}: {best * 1e6 / args.records:.1f} µs per record")


if __name__ == "__main__":
    main()
