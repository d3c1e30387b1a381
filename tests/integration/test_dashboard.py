"""The dashboard in headless Chromium, served by a real API following a real broker and
speed job: it loads with no request to another host, takes the key, shows rows, and
shows an entry sent to Kafka during the test without a reload.

``DASHBOARD_SCREENSHOT=<path>``: also keep a screenshot of the page there.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
from pyspark.sql import SparkSession

from lambdaline.processes import wait_until_answers
from shared.domain.events import format_instant
from shared.platform.kafka_admin import kafka_producer
from shared.settings import Settings
from speed_layer import job
from tests.browser import Browser
from tests.integration.helpers import isolated_settings, spawn_api
from tests.scenarios import entry_value

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "dashboard-key-4b1e"


def send_entry(settings: Settings, booth: str, plate: str, minutes_ago: float) -> None:
    producer = kafka_producer(settings.kafka, "dashboard-test")
    try:
        entered = format_instant(datetime.now(UTC) - timedelta(minutes=minutes_ago))
        value = entry_value(f"e-{booth}", booth, plate, entered, "4.75")
        producer.send(settings.topics.entries, key=plate.encode(), value=value).get(timeout=30)
    finally:
        producer.close()


@pytest.fixture
def api(kafka: Settings, tmp_path: Path) -> Iterator[tuple[Settings, str, Path]]:
    settings = isolated_settings(kafka, tmp_path / "state")
    log = tmp_path / "serve.log"
    server, url = spawn_api(settings, KEY, log)
    try:
        with httpx2.Client(base_url=url, timeout=30) as client:
            assert wait_until_answers(client, 60, process=server), log.read_text()
        yield settings, url, log
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_dashboard_shows_rows_and_an_entry_sent_meanwhile_without_a_reload(
    api: tuple[Settings, str, Path], spark: SparkSession, tmp_path: Path
) -> None:
    settings, url, log = api
    send_entry(settings, "B-DASH-1", "P-DASH-1", minutes_ago=20)
    job.run(spark, settings, available_now=True)

    browser = Browser(tmp_path / "profile")
    try:
        browser.navigate(f"{url}/")
        assert browser.evaluate("!document.getElementById('key-form').hidden")
        browser.evaluate(f"""
            document.getElementById('key').value = {json.dumps(KEY)};
            document.getElementById('key-form').requestSubmit();
        """)  # fmt: skip
        browser.wait_for(
            "[...document.querySelectorAll('#booth option')].some(o => o.value === 'B-DASH-1')"
            " && document.querySelectorAll('#chart rect').length > 0",
            60, "B-DASH-1's row on the chart",
        )  # fmt: skip
        browser.wait_for("document.getElementById('live').textContent === 'live'", 30, "the stream")
        loaded_at = browser.evaluate("performance.timeOrigin")
        note = browser.evaluate("document.getElementById('chart-note').textContent")
        assert "1 speed provisional rows" in note or "1 speed final rows" in note, note

        send_entry(settings, "B-DASH-2", "P-DASH-2", minutes_ago=10)
        job.run(spark, settings, available_now=True)
        browser.wait_for(
            "[...document.querySelectorAll('#booth option')].some(o => o.value === 'B-DASH-2')",
            60, "B-DASH-2, sent during the test, on the page",
        )  # fmt: skip
        note = browser.wait_for(
            "(t => /: 0 batch, [0-9]+ speed final, [0-9]+ speed provisional rows/.test(t)"
            " && t)(document.getElementById('chart-note').textContent)",
            10, "the chart's note",
        )  # fmt: skip
        counts = [int(n) for n in note.rsplit(":", 1)[1].split() if n.isdigit()]
        assert counts[0] == 0 and counts[1] + counts[2] == 2, note
        assert browser.evaluate("performance.timeOrigin") == loaded_at, "the page was reloaded"
        assert browser.evaluate("performance.getEntriesByType('navigation').length") == 1
        # all of it under a policy of the same origin only, which refused nothing
        policy = browser.evaluate("fetch('/').then(r => r.headers.get('content-security-policy'))")
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert browser.csp_violations() == []

        if os.environ.get("DASHBOARD_SCREENSHOT"):
            browser.screenshot(Path(os.environ["DASHBOARD_SCREENSHOT"]))
        requested = browser.requests()
    finally:
        browser.close()
    assert requested, "no request recorded"
    others = [found for found in requested if not found.startswith(f"{url}/")]
    assert not others, f"requests to another host: {others}"
    assert f"{url}/v1/stream?views=booth_stats,expired_registrations" in requested
    assert not [found for found in requested if KEY in found], "the key in a URL"
    assert KEY not in log.read_text(), "the key in the server's log"
