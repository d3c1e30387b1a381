"""How long a change of view settings takes to be ready, on the bench's dataset (a
measurement, not a test).

    .venv/bin/python benchmarks/generation_switch.py [--events 1000000] [--out DIR]

Starts its own broker (free ports, temporary state), sends the bench's dataset (seed 7,
three days from 2026-01-05, ``lambdaline.bench.run``), and makes generation 1 as a
deployment has it: ``batch run`` of the second day (horizon 2026-01-07) and ``speed run
--available-now``. Then, each a command of its own, timed:

1. ``LAMBDALINE_WINDOW=10m LAMBDALINE_SESSION_GAP=20m generation start`` (its speed job
   starts in the background and reads the input from the horizon less a day and the
   lateness bounds);
2. ``batch run --generation 2`` of the same day (every date: its store is new), while
   that job runs;
3. ``generation promote --when-ready``: returns once the job's watermark is within
   ``speed_promote_watermark_gap`` of generation 1's and its lag under the bound.

It prints, and writes as JSON to ``--out``: seconds from ``start`` to ready (promoted),
each step's, and the API's resident memory (``lambdaline serve``, one worker) with one
generation and with both materialised. Everything it starts it stops, by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from lambdaline.bench.run import DATA_DAYS, RECORDS_PER_ENTRY, START
from lambdaline.generations import stop_job
from lambdaline.generator import GeneratorConfig, send_to_kafka
from lambdaline.kafka_broker import ephemeral_broker, free_port
from lambdaline.processes import CLI, exit_on_signals, stop_process, wait_until_answers
from shared.platform.topic_admin import create_topics
from shared.settings import Settings

KEY = "generation-switch-key"
NEW = {"LAMBDALINE_WINDOW": "10m", "LAMBDALINE_SESSION_GAP": "20m"}


def _environment(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "LAMBDALINE_STATE_DIR": str(settings.state_dir),
        "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka.bootstrap,
        "LAMBDALINE_API_KEYS": KEY,
        "COLUMNS": "200",
    }


def _timed(env: dict[str, str], *args: str) -> float:
    """Run ``lambdaline ARGS``; its seconds, or SystemExit with its output."""
    began = time.monotonic()
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"`lambdaline {' '.join(args)}` exited {done.returncode}:\n{done.stderr[-3000:]}")
    return round(time.monotonic() - began, 1)


def _rss_mib(pid: int) -> float:
    """Resident memory of a process and its descendants, MiB."""
    total, pending = 0, [pid]
    while pending:
        task = pending.pop()
        try:
            status = Path(f"/proc/{task}/status").read_text()
            children = Path(f"/proc/{task}/task/{task}/children").read_text().split()
        except FileNotFoundError:
            continue
        total += next(int(line.split()[1]) for line in status.splitlines() if "VmRSS" in line)
        pending += [int(child) for child in children]
    return round(total / 1024, 1)


def measure(events: int, folder: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"events_asked": events}
    with ephemeral_broker(folder / "state", kafka_heap="512m") as broker:
        settings = broker.updated(spark_master="local[2]")
        create_topics(settings)
        env = _environment(settings)
        entries = max(1, round(events / RECORDS_PER_ENTRY))
        config = GeneratorConfig(
            events=entries, seed=7, start=START, traffic=entries / (DATA_DAYS * 86400),
            plates=max(1000, entries // 10),
        )  # fmt: skip
        summary = send_to_kafka(config, settings)
        results["events"] = summary.records
        day = "2026-01-06"
        results["generation_1_batch_s"] = _timed(env, "batch", "run", "--date", day)
        results["generation_1_speed_s"] = _timed(env, "speed", "run", "--available-now")
        port = free_port()
        log = (folder / "api.log").open("ab")
        api = subprocess.Popen(
            [*CLI, "serve", "--port", str(port)], env=env, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                if not wait_until_answers(client, 300, "/readyz", api):
                    sys.exit(f"the API did not get ready; see {folder / 'api.log'}")
            results["api_rss_one_generation_mib"] = _rss_mib(api.pid)
            began = time.monotonic()
            results["start_s"] = _timed({**env, **NEW}, "generation", "start")
            results["batch_s"] = _timed(env, "batch", "run", "--generation", "2", "--date", day)
            results["promote_wait_s"] = _timed(
                env, "generation", "promote", "--when-ready", "--timeout", "1h"
            )
            results["start_to_ready_s"] = round(time.monotonic() - began, 1)
            results["api_rss_two_generations_mib"] = _rss_mib(api.pid)
        finally:
            stop_job(settings.updated(generation=2))
            stop_process(api)
    return results


def main() -> None:
    exit_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lambdaline-generations-") as scratch:
        results = measure(options.events, Path(scratch))
    print(json.dumps(results, indent=2))
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)
        (options.out / "generation_switch.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
