"""The deploy files and the docs name only settings that exist, and one schedule.

A renamed setting leaves an old name in a crontab or a CronJob, where nothing
reads it until a night's run does; these tests read the files as text.
"""

from __future__ import annotations

import ast
import re
import subprocess
from datetime import timedelta
from pathlib import Path

import yaml

from shared.domain.topics import Topics
from shared.settings import (
    duration_label,
    environment_name,
    setting_field,
    setting_names,
    unknown_environment,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "batch"
VARIABLE = re.compile(r"\bLAMBDALINE_[A-Z0-9_]+")


def test_every_variable_the_docs_and_deploy_files_name_is_a_setting() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted(path for path in (ROOT / "deploy").rglob("*") if path.is_file())
    named = {name: "" for path in files for name in VARIABLE.findall(path.read_text())}

    assert len(named) > 30  # the pattern finds them (the README alone names ~40)
    # the one the docs misspell on purpose, to show the error it gives
    assert unknown_environment(named) == [
        "unknown setting LAMBDALINE_SPARK_DRIVER_MEM: no setting has that name; "
        "did you mean LAMBDALINE_SPARK_DRIVER_MEMORY?"
    ]


def test_the_crontab_the_cronjob_and_the_dag_keep_the_default_schedule_in_utc() -> None:
    default = setting_field("batch_cron").default
    assert default == "0 2 * * *"

    crontab = [
        line for line in (DEPLOY / "crontab").read_text().splitlines()
        if line and not line.startswith("#")
    ]  # fmt: skip
    assert crontab[0] == "CRON_TZ=UTC"
    assert crontab[1].split()[:5] == default.split()
    assert "lambdaline batch run" in crontab[1]

    cronjob = yaml.safe_load((DEPLOY / "cronjob.yaml").read_text())
    assert (cronjob["spec"]["schedule"], cronjob["spec"]["timeZone"]) == (default, "Etc/UTC")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"  # one run at a time
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["lambdaline", "batch", "run"]

    dag = ast.parse((DEPLOY / "airflow_dag.py").read_text())
    arguments = {
        keyword.arg: keyword.value for node in ast.walk(dag)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "DAG"
        for keyword in node.keywords
    }  # fmt: skip
    assert ast.literal_eval(arguments["schedule"]) == default
    assert ast.literal_eval(arguments["max_active_runs"]) == 1


def readme_settings() -> dict[str, str]:
    """The README's settings table: each variable and its default, as written there."""
    readme = ROOT / "README.md"
    rows = {}
    for line in readme.read_text().splitlines():
        found = re.match(r"\| `(LAMBDALINE_[A-Z0-9_]+)` \| ([^|]+) \|", line)
        if found:
            assert found.group(1) not in rows, f"{found.group(1)} is listed twice"
            rows[found.group(1)] = found.group(2).strip()
    return rows


def test_the_readme_lists_every_setting_with_its_default() -> None:
    rows = readme_settings()
    assert set(rows) == {environment_name(name) for name in setting_names()}
    written_by_hand = {
        "state_dir": "`.lambdaline`", "jvm_cache_dir": "`~/.cache/lambdaline/jvm`",
        "topics": "the six below", "master_dir": "`<state_dir>/master`",
        "batch_store_dir": "`<state_dir>/batch`",
    }  # fmt: skip
    for name in setting_names():
        if name in written_by_hand:
            expected = written_by_hand[name]
        elif name.startswith("topics."):
            expected = f"`{getattr(Topics, name.split('.')[1])}`"  # the field's default
        else:
            expected = _default_as_written(
                setting_field(name).get_default(call_default_factory=True)
            )
        assert rows[environment_name(name)] == expected, name


def _default_as_written(default: object) -> str:
    if default is None or default in ([], {}):
        return "none"
    if isinstance(default, timedelta):
        return f"`{duration_label(default)}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def test_the_documents_stay_guides_of_their_size() -> None:
    """A README of at most about 300 lines, the contract within 600, the performance
    notes within 300: what they hold is current, and history lives in git."""
    limits = {"README.md": 300, "docs/architecture.md": 600, "docs/performance.md": 300}
    lines = {name: len((ROOT / name).read_text().splitlines()) for name in limits}
    assert {name: n for name, n in lines.items() if n > limits[name]} == {}


HISTORY = re.compile(
    r"design\.md|(before|since|until|tried|as of) 20[0-9]{2}-[0-9]{2}", re.IGNORECASE
)


def test_no_code_tells_history_or_cites_a_document_outside_the_repository() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found = [
        f"{name}:{number}: {line.strip()}"
        for name in listed
        if (ROOT / name).is_file()  # a file deleted and not yet committed is listed too
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == []
