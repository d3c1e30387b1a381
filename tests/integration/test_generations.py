"""Changing a view with no gap: a second generation under continuous load.

The commands run as their own processes, as a deployment runs them: the generator
sends the second day while generation 1's speed job runs and API clients poll the
views. ``window`` 5m -> 10m and ``session_gap`` 30m -> 20m start generation 2
(``lambdaline generation start``, which starts its speed job); its promotion is refused
while it has no batch version, a promotion killed with ``kill -9`` before ``ACTIVE``
moves leaves generation 1 served, its batch run makes it ready, and it is promoted,
rolled back and promoted again. Once the generator stops and both jobs have read
everything, each generation's answers equal the reference SQL's rows under its own
settings. Retiring generation 1 deletes its checkpoint and topics.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import httpx2
import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from lambdaline.generations import stop_job
from lambdaline.processes import stop_process, wait_until_answers
from shared.domain.views.view import ViewSizes
from shared.platform.generations import read_active, read_generations
from shared.platform.kafka_admin import admin_client
from shared.settings import Settings
from tests.integration.helpers import (
    environment_of,
    isolated_settings,
    read_all,
    run_cli,
    spawn_api,
    spawn_cli,
    wait_until,
)
from tests.integration.oracle import ENTRY_COLUMNS, create_event_tables, oracle_views

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "generations-key"
NEW_SETTINGS = {"LAMBDALINE_WINDOW": "10m", "LAMBDALINE_SESSION_GAP": "20m"}
DAY_1 = "2026-01-05"
RANGE = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-07T00:00:00Z", "limit": "100000"}
WHEN_READY = ("--when-ready", "--timeout", "5m")
QUIET = ["--late", "0", "--duplicate", "0", "--malformed", "0", "--workers", "1"]
"""Every record on time and once: after the load stops, the speed store holds every row."""


def _window_lengths(rows: list[dict[str, Any]]) -> set[timedelta]:
    return {
        datetime.fromisoformat(row["window_end"]) - datetime.fromisoformat(row["window_start"])
        for row in rows
    }


def _token_generation(token: str) -> int | None:
    document = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    generation = document.get("generation")
    return int(generation) if generation is not None else None


class Pollers:
    """API clients polling ``booth_stats`` over both days, each passing its last answer's
    token as ``after=``, recording every answer."""

    def __init__(self, base: str, clients: int = 2):
        self.base = base
        self.answers: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._poll, daemon=True) for _ in range(clients)]

    def __enter__(self) -> Pollers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _poll(self) -> None:
        token = None
        with httpx2.Client(base_url=self.base, timeout=30, headers={"X-API-Key": KEY}) as client:
            while not self._stop.is_set():
                params = {**RANGE, **({"after": token} if token else {})}
                try:
                    answer = client.get("/v1/views/booth_stats", params=params)
                except httpx2.HTTPError as error:
                    with self._lock:
                        self.failures.append(f"{type(error).__name__}: {error}")
                    continue
                if answer.status_code != 200:
                    with self._lock:
                        self.failures.append(f"{answer.status_code}: {answer.text[:300]}")
                    continue
                body = answer.json()
                token = body["consistency"]
                seen = {
                    "generation": body["generation"],
                    "token_generation": _token_generation(token),
                    "after_generation": body.get("after_generation"),
                    "lengths": _window_lengths(body["rows"]),
                    "sources": Counter(row["source"] for row in body["rows"]),
                    "at": time.monotonic(),
                }
                with self._lock:
                    self.answers.append(seen)
                time.sleep(0.2)

    def of_generation(self, generation: int) -> list[dict[str, Any]]:
        with self._lock:
            return [answer for answer in self.answers if answer["generation"] == generation]


def _rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, MiB."""
    total = 0
    for task in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{task}/status").read_text()
        except FileNotFoundError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    found = [int(child) for child in text.split()]
    return found + [grandchild for child in found for grandchild in _children(child)]


def _status(settings: Settings) -> dict[str, Any]:
    shown = run_cli(settings, "generation", "status", "--json", timeout_s=180)
    assert shown.returncode == 0, shown.stderr[-2000:]
    document: dict[str, Any] = json.loads(shown.stdout)
    return document


def _oracle(settings: Settings, sizes: ViewSizes) -> dict[str, list[dict[str, Any]]]:
    """booth_stats and vehicle_visits by the reference SQL over every entry sent."""
    with duckdb.connect() as connection:
        create_event_tables(connection, sent_type="TIMESTAMP")
        for record in read_all(settings, settings.topics.entries):
            event = json.loads(record.value)
            connection.execute(
                f"INSERT INTO entries {ENTRY_COLUMNS} VALUES (?, ?, ?, ?, ?, ?)",
                [
                    event["event_id"], event["booth_id"], event["license_plate"],
                    datetime.fromisoformat(event["entry_time"]).replace(tzinfo=None),
                    event["toll"],
                    datetime.fromtimestamp(record.timestamp / 1000, UTC).replace(tzinfo=None),
                ],
            )  # fmt: skip
        return oracle_views(connection, sizes)


def _answer(base: str, view: str) -> dict[str, Any]:
    answer = httpx2.get(
        f"{base}/v1/views/{view}", params=RANGE, headers={"X-API-Key": KEY}, timeout=60
    )
    assert answer.status_code == 200, answer.text[:500]
    body: dict[str, Any] = answer.json()
    return body


STATS_COLUMNS = ("booth_id", "window_start", "window_end", "vehicle_count", "total_toll")
VISIT_COLUMNS = ("license_plate", "session_start", "session_end", "entry_count", "total_toll")


def _matches_oracle(base: str, settings: Settings, sizes: ViewSizes, generation: int) -> None:
    """The served answers of booth_stats, and of the visits that have ended, equal the
    reference SQL's rows under ``sizes``."""
    expected = _oracle(settings, sizes)
    stats = _answer(base, "booth_stats")
    assert stats["generation"] == generation
    assert [tuple(row[c] for c in STATS_COLUMNS) for row in stats["rows"]] == [
        tuple(row[c] for c in STATS_COLUMNS) for row in expected["booth_stats"]
    ]
    visits = _answer(base, "vehicle_visits")
    # a visit is served once the watermark passes its end (append): the last ones are open
    ended = visits["speed_watermark"]
    assert ended is not None
    assert [tuple(row[c] for c in VISIT_COLUMNS) for row in visits["rows"]] == [
        tuple(row[c] for c in VISIT_COLUMNS)
        for row in expected["vehicle_visits"]
        if row["session_end"] <= ended
    ]


@pytest.fixture(scope="module")
def load(kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Generation 1 served under load: its batch version of the first day, its speed
    job, the API, the generator sending the second day; yields them to the test."""
    state = tmp_path_factory.mktemp("generations")
    settings = isolated_settings(kafka, state)
    with pytest.MonkeyPatch.context() as patch:
        # the generator runs 30 simulated s a real s: the default 1 min is 2 real s
        patch.setenv("LAMBDALINE_SPEED_PROMOTE_WATERMARK_GAP", "15m")
        yield from _loaded(settings, state, spark)


def _loaded(settings: Settings, state: Path, spark: SparkSession) -> Any:
    env = environment_of(settings)
    history = run_cli(
        settings, "generate", "--start", f"{DAY_1}T22:00:00Z", "--duration", "2h",
        "--speedup", "0", "--traffic", "0.2", "--seed", "1", *QUIET, timeout_s=300,
    )  # fmt: skip
    assert history.returncode == 0, history.stderr[-2000:]
    # generation 1's first version, in the session's Spark (generation 2's is `batch run`)
    run_batch(
        spark, settings, date.fromisoformat(DAY_1), settings.batch.lookback_days,
        console=Console(file=io.StringIO()),
    )  # fmt: skip
    started = []
    try:
        speed = spawn_cli(["speed", "run"], env, state / "speed-g1.log")
        started.append(speed)
        api, base = spawn_api(settings, KEY, state / "api.log")
        started.append(api)
        generator = spawn_cli(
            ["generate", "--start", "2026-01-06T00:00:00Z", "--duration", "6h", "--speedup", "30",
             "--traffic", "0.2", "--seed", "2", *QUIET],
            env, state / "generator.log",
        )  # fmt: skip
        started.append(generator)
        with httpx2.Client(base_url=base, timeout=10) as client:
            assert wait_until_answers(client, 300, "/readyz", api), (state / "api.log").read_text()
        yield settings, state, base, api, generator
    finally:
        stop_job(settings.updated(generation=2))  # started by `generation start`
        for process in reversed(started):
            if process.poll() is None:
                stop_process(process)
        for log in sorted(state.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")


def test_a_view_changes_under_load_with_no_gap(load: Any) -> None:
    settings, state, base, api, generator = load
    root = settings.batch_store_root
    env = environment_of(settings)
    new_env = {**env, **NEW_SETTINGS}
    new_sizes = settings.updated(window="10m", session_gap="20m").views.sizes
    with Pollers(base) as pollers:
        wait_until(
            lambda: any(a["sources"]["speed"] for a in pollers.of_generation(1)),
            300, "answers of generation 1 with speed rows",
        )  # fmt: skip
        rss_one = _rss_mib(api.pid)

        # generation 2: recorded, its topics and its speed job started
        started_at = time.monotonic()
        start = subprocess.run(
            [sys.executable, "-m", "lambdaline.cli", "generation", "start"],
            env={**new_env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert start.returncode == 0, start.stderr[-3000:]
        assert "5m -> 10m" in start.stdout and "30m -> 20m" in start.stdout, start.stdout
        recorded = read_generations(root)
        assert sorted(recorded) == [1, 2]
        assert recorded[2].view_settings["window"] == "10m"
        assert recorded[1].view_settings["window"] == "5m"

        # refused while it has no batch version, naming what it waits for
        early = run_cli(settings, "generation", "promote", timeout_s=180)
        assert early.returncode == 1
        assert "not ready" in early.stderr and "batch version" in early.stderr, early.stderr
        assert read_active(root).generation == 1

        batch = run_cli(settings, "batch", "run", "--generation", "2", "--date", DAY_1,
                        timeout_s=900)  # fmt: skip
        assert batch.returncode == 0, batch.stderr[-3000:]

        # kill -9 while promoting, once it is ready: still exactly generation 1 served
        log = state / "promote-killed.log"
        killed = spawn_cli(
            ["generation", "promote", "--when-ready", "--timeout", "15m"],
            {**env, "LAMBDALINE_FAILPOINT": "promote_before_pointer"}, log,
        )  # fmt: skip
        try:
            wait_until(lambda: "failpoint_reached" in log.read_text(), 900, "generation 2 ready")
        finally:
            ready_s = time.monotonic() - started_at
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
        assert read_active(root).generation == 1
        status = httpx2.get(f"{base}/v1/status", headers={"X-API-Key": KEY}, timeout=30).json()
        assert status["generation"] == 1
        [one, two] = status["generations"]
        assert (one["served"], two["served"], two["materialised"]) == (True, False, True)
        time.sleep(2)
        rss_two = _rss_mib(api.pid)

        promoted = run_cli(settings, "generation", "promote", *WHEN_READY, timeout_s=400)
        assert promoted.returncode == 0, promoted.stderr[-3000:]
        assert read_active(root).generation == 2
        wait_until(lambda: len(pollers.of_generation(2)) >= 5, 120, "answers of generation 2")

        back = run_cli(settings, "generation", "rollback", timeout_s=60)
        assert back.returncode == 0, back.stderr[-2000:]
        switched_back = time.monotonic()
        wait_until(
            lambda: any(a["at"] > switched_back + 2 for a in pollers.of_generation(1)),
            120, "answers of generation 1 after the rollback",
        )  # fmt: skip
        again = run_cli(settings, "generation", "promote", *WHEN_READY, timeout_s=400)
        assert again.returncode == 0, again.stderr[-3000:]
        assert read_active(root).generation == 2
        promoted_again = time.monotonic()
        wait_until(
            lambda: any(a["at"] > promoted_again + 2 for a in pollers.of_generation(2)),
            120, "answers of generation 2 after promoting it again",
        )  # fmt: skip
        stop_process(generator)

    print(
        f"generation start -> ready: {ready_s:.0f} s; API RSS {rss_one:.0f} MiB with one "
        f"generation, {rss_two:.0f} MiB with two (+{rss_two - rss_one:.0f} MiB)"
    )
    assert not pollers.failures, pollers.failures[:5]
    for answer in pollers.answers:
        assert answer["token_generation"] == answer["generation"]
        expected = {1: timedelta(minutes=5), 2: timedelta(minutes=10)}[answer["generation"]]
        assert answer["lengths"] <= {expected}, answer
    assert len(pollers.of_generation(1)) >= 5 and len(pollers.of_generation(2)) >= 5
    assert any(a["after_generation"] == 1 for a in pollers.of_generation(2))

    # the load stopped: once both jobs have read everything, each generation's answers
    # are the reference's under its own settings
    def drained() -> bool:
        shown = _status(settings)["generations"]
        return all(g["speed_lag_records"] == 0 for g in shown)

    wait_until(drained, 600, "both speed jobs to read every input record")
    time.sleep(5)  # the API reads what they wrote last
    _matches_oracle(base, settings, new_sizes, generation=2)
    back = run_cli(settings, "generation", "rollback", timeout_s=60)
    assert back.returncode == 0, back.stderr[-2000:]
    wait_until(lambda: _answer(base, "booth_stats")["generation"] == 1, 60, "generation 1")
    _matches_oracle(base, settings, settings.views.sizes, generation=1)
    again = run_cli(settings, "generation", "promote", *WHEN_READY, timeout_s=400)
    assert again.returncode == 0, again.stderr[-3000:]
    wait_until(lambda: _answer(base, "booth_stats")["generation"] == 2, 60, "generation 2")

    # retired: generation 1's job stopped, its checkpoint, topics and batch store gone
    retired = run_cli(settings, "generation", "retire", "1", timeout_s=180)
    assert retired.returncode == 0, retired.stderr[-2000:]
    assert not (settings.checkpoints_dir / "speed").exists()
    assert (settings.checkpoints_dir / "speed.g2").exists()
    admin = admin_client(settings.kafka)
    try:
        present = set(admin.list_topics())
    finally:
        admin.close()
    first = settings.speed_topics.speed_store()
    second = settings.updated(generation=2).speed_topics.speed_store()
    assert not present & set(first)
    assert set(second) <= present
    assert not (root / "CURRENT").exists()
    assert read_generations(root)[1].retired_at is not None
    assert _answer(base, "booth_stats")["generation"] == 2
    refused = run_cli(settings, "generation", "rollback", timeout_s=60)
    assert refused.returncode == 1 and "retired" in refused.stderr
