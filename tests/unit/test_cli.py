"""The command line's answers to bad input: a clear message and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import stat
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from batch_layer.cli import require_closed
from lambdaline.cli import app, topics_table
from lambdaline.kafka_broker import free_port, new_cluster_id
from shared.platform.jvm import JarResolutionError, JvmProfile, resolve_jars
from shared.platform.locks import exclusive_lock
from shared.platform.topic_admin import TopicOutcome, all_topics
from shared.settings import Settings

runner = CliRunner()


def error_text(output: str) -> str:
    """Click's error as one line: rich draws it in a box and wraps it at 80 columns."""
    return " ".join(output.replace("│", " ").split())


def unspaced(text: str) -> str:
    """:func:`error_text` without any space: where rich broke a line does not matter."""
    return "".join(error_text(text).split())


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("kafka", "topics", "generate", "demo", "jvm"):
        assert command in result.output


def test_a_long_line_stays_whole_when_not_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / ("a-long-folder-name-" * 5)  # the line is wider than 80 columns
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(state))
    result = runner.invoke(app, ["kafka", "status"])
    assert result.exit_code == 3  # not running, as LSB status commands say
    # a path broken over two lines cannot be copied, nor found in a log
    assert f"log {state / 'logs' / 'kafka-1.log'}\n" in result.output


def test_a_bad_setting_stops_any_command_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMBDALINE_WATERMARK", "two minutes")
    result = runner.invoke(app, ["kafka", "status"])
    assert result.exit_code == 2
    assert "LAMBDALINE_WATERMARK" in result.output


def test_generate_rejects_a_start_without_time_zone(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    result = runner.invoke(
        app, ["generate", "--events", "5", "--start", "2026-01-01T00:00:00", "--out", str(out)]
    )
    assert result.exit_code == 2
    assert (
        "Invalid value for '--start': '2026-01-01T00:00:00' is not an instant with a time zone"
        in error_text(result.output)
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--duration", "-5m"), ("--duration", "0s"), ("--late-mean", "-3m"), ("--late-mean", "soon")],
)
def test_generate_rejects_a_duration_that_is_not_positive(
    tmp_path: Path, option: str, value: str
) -> None:
    """A negative mean lateness sent 'late' records early; a zero duration generated nothing."""
    out = tmp_path / "x.jsonl"
    result = runner.invoke(app, ["generate", "--events", "5", option, value, "--out", str(out)])
    assert result.exit_code == 2
    message = f"Invalid value for '{option}': '{value}' is not a positive duration"
    assert message in error_text(result.output)
    assert not out.exists()


def test_generate_rejects_a_fraction_above_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["generate", "--malformed", "1.5", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "--malformed" in result.output


def test_an_out_option_naming_the_wrong_kind_of_path_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "results"
    a_file.write_text("")
    generate = runner.invoke(app, ["generate", "--events", "1", "--out", str(tmp_path)])
    assert generate.exit_code == 2
    # a path longer than the box's line is cut anywhere: compared without spaces
    assert unspaced(f"Invalid value for '--out': file '{tmp_path}' is a directory") in unspaced(
        generate.output
    )
    bench = runner.invoke(app, ["bench", "--out", str(a_file)])
    assert bench.exit_code == 2
    assert unspaced(f"Invalid value for '--out': dir '{a_file}' is a file") in unspaced(
        bench.output
    )


def test_generate_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "stream.jsonl"
    result = runner.invoke(
        app, ["generate", "--events", "50", "--plates", "20", "--malformed", "0", "--duplicate",
              "0", "--missing-exit", "0", "--unregistered", "0", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
    assert kinds.count("entry") == 50
    assert kinds.count("exit") == 50
    assert kinds.count("registration") == 20


def test_kafka_status_exits_non_zero_when_no_broker_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    result = runner.invoke(app, ["kafka", "status"])
    assert result.exit_code == 3
    assert "not running" in result.output


def test_topics_create_names_the_unreachable_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.setenv("LAMBDALINE_KAFKA_TIMEOUT", "2s")
    result = runner.invoke(app, ["topics", "create"])
    assert result.exit_code == 1
    assert "cannot reach Kafka at 127.0.0.1:1" in result.output


def _fake_mvn(folder: Path, output: str) -> None:
    """A stand-in `mvn` that fails as Maven does when Maven Central is out of reach."""
    script = folder / "mvn"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_unreachable_maven_central_is_said_plainly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_mvn(
        tmp_path,
        "[ERROR] Failed to execute goal on project lambdaline-jvm: Could not resolve dependencies"
        " ... Could not transfer artifact org.apache.kafka:kafka_2.13:pom:4.3.1 from/to central:"
        " Unknown host repo.example: Name or service not known -> [Help 1]",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    settings = Settings(jvm_cache_dir=tmp_path / "cache")
    with pytest.raises(JarResolutionError, match="cannot reach Maven Central"):
        resolve_jars(settings.jvm_cache_dir, JvmProfile.KAFKA_BROKER)
    assert not any((tmp_path / "cache").iterdir())  # nothing half-resolved is left behind


def test_batch_run_rejects_a_bad_date() -> None:
    result = runner.invoke(app, ["batch", "run", "--date", "yesterday"])
    assert result.exit_code == 2
    message = "Invalid value for '--date': 'yesterday' is not a date (YYYY-MM-DD)"
    assert message in error_text(result.output)


def test_batch_run_refuses_a_day_that_is_not_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date()
    result = runner.invoke(app, ["batch", "run", "--date", tomorrow.isoformat()])
    assert result.exit_code == 2
    message = error_text(result.output)
    assert f"Invalid value for '--date': {tomorrow} is not over yet" in message
    assert f"horizon of {tomorrow + timedelta(days=1)}T00:00:00.000Z" in message
    assert "--allow-open-day" in message
    assert not (tmp_path / "batch").exists()  # refused before anything started


@pytest.mark.parametrize(
    ("now", "refused"),
    [
        (datetime(2026, 1, 5, 23, 59, 59, 999000, tzinfo=UTC), True),
        (datetime(2026, 1, 6, 0, 0, tzinfo=UTC), False),  # the day has just ended
        (datetime(2026, 1, 4, 12, 0, tzinfo=UTC), True),
    ],
)
def test_a_run_date_is_closed_once_its_day_has_ended(now: datetime, refused: bool) -> None:
    if refused:
        with pytest.raises(typer.BadParameter, match="2026-01-05 is not over yet"):
            require_closed(date(2026, 1, 5), now)
    else:
        require_closed(date(2026, 1, 5), now)


def test_speed_run_refuses_to_share_its_checkpoint_with_another_speed_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    lock = tmp_path / "checkpoints" / "speed.lock"
    with exclusive_lock(lock, "another speed job", "-"):  # as a running `speed run` holds it
        result = runner.invoke(app, ["speed", "run"])
    assert result.exit_code == 1
    assert (
        f"error: another speed job holds {lock} (pid {os.getpid()}); two jobs on one checkpoint "
        "would fail each other; stop it first, or give this one another LAMBDALINE_STATE_DIR"
        in " ".join(result.output.split())
    )


def test_speed_run_refuses_a_checkpoint_made_with_another_window_before_kafka_or_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")  # nothing there
    made_with = tmp_path / "checkpoints" / "speed" / "view_settings.json"
    made_with.parent.mkdir(parents=True)
    made_with.write_text(
        '{"max_trip": "1h", "registration_lookback": "400d", "rolling_slide": "5m", '
        '"rolling_window": "1h", "session_gap": "30m", "window": "5m"}'
    )  # as a start with the defaults
    monkeypatch.setenv("LAMBDALINE_WINDOW", "10m")
    result = runner.invoke(app, ["speed", "run"])
    assert result.exit_code == 1
    assert (
        f"error: the speed checkpoint {made_with.parent} was made with max_trip=1h, registration_lookback=400d, "
        "rolling_slide=5m, rolling_window=1h, session_gap=30m, window=5m, but the settings now say max_trip=1h, "
        "registration_lookback=400d, rolling_slide=5m, rolling_window=1h, session_gap=30m, window=10m"
    ) in " ".join(result.output.split())
    assert json.loads(made_with.read_text()) == {
        "max_trip": "1h",
        "registration_lookback": "400d",
        "rolling_slide": "5m",
        "rolling_window": "1h",
        "session_gap": "30m",
        "window": "5m",
    }


@pytest.fixture
def speed_checkpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A state folder with a speed checkpoint, which a refused reset must leave."""
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    checkpoint = tmp_path / "checkpoints" / "speed"
    checkpoint.mkdir(parents=True)
    return checkpoint


def test_speed_reset_asks_first_and_deletes_nothing_without_an_answer(
    speed_checkpoint: Path,
) -> None:
    result = runner.invoke(app, ["speed", "reset"])  # the runner's stdin is no terminal
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert f"This deletes the speed checkpoint {speed_checkpoint} and the topics speed." in said
    assert "error: nothing deleted: confirm with --yes where there is no terminal to ask" in said
    assert speed_checkpoint.is_dir()


def test_speed_reset_deletes_nothing_while_a_speed_job_runs(speed_checkpoint: Path) -> None:
    lock = speed_checkpoint.with_name("speed.lock")
    with exclusive_lock(lock, "another speed job", "-"):  # as a running `speed run` holds it
        result = runner.invoke(app, ["speed", "reset", "--yes"])
    assert result.exit_code == 1
    assert f"error: another speed job holds {lock}" in " ".join(result.output.split())
    assert speed_checkpoint.is_dir()


def test_speed_reset_deletes_nothing_when_kafka_does_not_answer(
    speed_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing there
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", bootstrap)
    result = runner.invoke(app, ["speed", "reset", "--yes"])
    assert result.exit_code == 1
    assert f"error: cannot reach Kafka at {bootstrap}" in " ".join(result.output.split())
    assert speed_checkpoint.is_dir()


def test_a_second_demo_on_the_same_state_folder_is_refused_before_it_starts_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    with exclusive_lock(tmp_path / "demo.lock", "another demo", "-"):  # as a running demo does
        result = runner.invoke(app, ["demo", "--fresh", "--port", str(free_port())])
    assert result.exit_code == 1
    assert (
        f"error: another demo holds {tmp_path / 'demo.lock'} (pid {os.getpid()}); stop it "
        "(Ctrl-C where it runs), or give this one another LAMBDALINE_STATE_DIR"
        in " ".join(result.output.split())
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["demo.lock"]  # nothing started


def test_batch_schedule_rejects_a_bad_cron_expression() -> None:
    result = runner.invoke(app, ["batch", "schedule", "--cron", "0 2 * * 9"])
    assert result.exit_code == 2
    assert (
        "Invalid value for '--cron': '0 2 * * 9' is not a cron expression: "
        "its day-of-week field '9' is not valid (0-7 or sun-sat)"
    ) in error_text(result.output)


def test_batch_rollback_names_the_kept_versions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    result = runner.invoke(app, ["batch", "rollback", "3"])
    assert result.exit_code == 1
    assert "version 3 is not in" in result.output
    assert "kept versions: none" in result.output


def test_batch_versions_on_an_empty_store_says_how_to_fill_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    result = runner.invoke(app, ["batch", "versions", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output) == []
    assert "lambdaline batch run" in runner.invoke(app, ["batch", "versions"]).output


@pytest.mark.parametrize("command", [["batch", "run"], ["speed", "run"]])
def test_layers_name_an_unreachable_kafka_before_starting_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    result = runner.invoke(app, command)
    assert result.exit_code == 1
    assert "cannot reach Kafka at 127.0.0.1:" in result.output
    assert "lambdaline kafka start" in result.output


def test_cluster_ids_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(5000)]
    assert all(len(cluster_id) == 22 and not cluster_id.startswith("-") for cluster_id in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("width", [80, 120])
def test_the_topics_table_shows_every_name_and_setting_whole(tmp_path: Path, width: int) -> None:
    specs = all_topics(Settings(state_dir=tmp_path))
    outcomes = [
        TopicOutcome(spec, created=n % 2 == 0, partitions=spec.partitions)
        for n, spec in enumerate(specs)
    ]
    console = Console(file=io.StringIO(), width=width)

    console.print(topics_table(outcomes))

    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    unfolded = text.replace("\n", " ").split()
    for spec in specs:
        assert spec.name in unfolded
    if width >= 100:  # wide enough for the longest setting on one line
        for spec in specs:
            for key, value in spec.config.items():
                assert f"{key}={value}" in unfolded
    assert text.count("created") == (len(specs) + 1) // 2


def test_the_topics_table_says_when_a_topic_has_other_partitions_than_the_setting(
    tmp_path: Path,
) -> None:
    spec = all_topics(Settings(state_dir=tmp_path, kafka_partitions=4))[0]
    console = Console(file=io.StringIO(), width=120)
    console.print(topics_table([TopicOutcome(spec, created=False, partitions=2)]))
    row = console.file.getvalue().splitlines()[-1]  # type: ignore[attr-defined]
    assert row.split()[:5] == ["toll.entries", "2", "exists", "(kafka_partitions", "is"]
    assert "is 4)" in row
