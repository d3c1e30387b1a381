"""The deploy files and the docs name only settings that exist, and one schedule.

A renamed setting leaves an old name in a crontab or a CronJob, where nothing
reads it until a night's run does; these tests read the files as text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from shared.settings import Settings, unknown_environment

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
    default = Settings.model_fields["batch_cron"].default
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
