"""``--dist loadgroup`` keeps a module's tests on one worker, so a module-scoped engine
(a broker's topics, a Spark job, a served API) starts once, not once per worker.

Two things broke it without a word: pytest-xdist reads the groups in its own
``pytest_collection_modifyitems`` on each worker, before ours had marked the tests
(ours is ``tryfirst``); and pytest 9.2's structured node ids drop the group suffix it
writes (pytest-xdist#1386: pyproject.toml keeps pytest below 9.2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]

MODULE = """
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def engine():
    with Path(os.environ["STARTS"]).open("a") as starts:
        starts.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")


@pytest.mark.parametrize("n", range(6))
def test_one(engine, n):
    pass
"""


def test_a_modules_tests_run_on_one_worker_and_its_fixture_starts_once(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "test_grouped.py").write_text(MODULE)
    starts = tmp_path / "starts.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
         # plugins the module does not use, loaded by each of the three processes
         "-p", "no:hypothesispytest", "-p", "no:schemathesis", "-p", "no:anyio",
         "--rootdir", str(tmp_path), "-n", "2", "--dist", "loadgroup", str(tmp_path)],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=120,
        env={**os.environ, "STARTS": str(starts), "PYTHONPATH": str(REPOSITORY)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "6 passed" in done.stdout
    assert len(starts.read_text().split()) == 1, starts.read_text()


ORDERED = """
import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("n", range({tests}))
def test_one(n):
    with Path(os.environ["STARTS"]).open("a") as ran:
        ran.write(__name__ + "\\n")
"""


def test_the_longest_group_is_sent_first(tmp_path: Path) -> None:
    # by name, pytest collects the short module first; by its estimate of their length
    # (conftest.GROUP_SECONDS, else a fixed time a test) the long one goes first
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "test_a_short.py").write_text(ORDERED.format(tests=1))
    (tmp_path / "test_b_long.py").write_text(ORDERED.format(tests=3))
    ran = tmp_path / "ran.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
         "-p", "no:hypothesispytest", "-p", "no:schemathesis", "-p", "no:anyio",
         "--rootdir", str(tmp_path), "-n", "1", "--dist", "loadgroup",
         "--no-loadscope-reorder", str(tmp_path)],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=120,
        env={**os.environ, "STARTS": str(ran), "PYTHONPATH": str(REPOSITORY)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert ran.read_text().split() == ["test_b_long"] * 3 + ["test_a_short"]
