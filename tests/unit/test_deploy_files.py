"""The deploy files and the docs name only settings that exist, and one schedule.

A renamed setting leaves an old name in a crontab or a CronJob, where nothing
reads it until a night's run does; these tests read the files as text.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import yaml

from lambdaline import settings_doc
from shared.settings import environment_name, setting_field, setting_names, unknown_environment

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


def test_the_configuration_page_is_what_the_settings_write() -> None:
    """docs/configuration.md: every setting with its default and description, as
    ``make docs`` writes it from the settings (run it after changing a setting)."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == settings_doc.render(), "docs/configuration.md is stale: run `make docs`"
    listed = re.findall(r"^\| `(LAMBDALINE_[A-Z0-9_]+)` \|", page, re.MULTILINE)
    assert listed == [environment_name(name) for name in setting_names()]
    assert "| `LAMBDALINE_SERVING_SQL_ROWS` | `10000` | most rows" in page  # read as a person would


def test_the_readme_names_only_defaults_the_settings_have() -> None:
    """The README's short table of the settings people change first."""
    readme = (ROOT / "README.md").read_text()
    for variables, defaults in re.findall(r"^\| (`LAMBDALINE_[^|]+) \| ([^|]+) \|", readme, re.M):
        for variable, default in zip(
            re.findall(r"LAMBDALINE_[A-Z0-9_]+", variables), defaults.split(", "), strict=False
        ):
            name = variable.removeprefix("LAMBDALINE_").lower()
            if default.startswith("`"):
                assert default.strip() == settings_doc.default_as_written(name), variable


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
