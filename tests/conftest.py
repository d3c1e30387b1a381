"""Fixtures shared by every test: one SparkSession for the whole run; for the tests that
need clusters, one Kafka cluster of three brokers and one Spark standalone cluster;
clean settings. And the suite's two tiers (``--tier``), with the fast tier's time kept.

``pytest --tier fast`` (``make test-fast``) runs the tests that need no broker and
start no process of the project's; ``pytest --tier slow`` the integration, fault and
end-to-end tests, with the check that the last fast run kept to its limit. ``make
test`` runs both, in that order. A fast run that ends records its wall time (from the
interpreter's start) in pytest's cache, under :data:`FAST_TIER_RECORD`.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from datetime import UTC, datetime

os.environ.setdefault(
    "PYARROW_IGNORE_TIMEZONE", "1"
)  # pyspark.pandas (assertDataFrameEqual) wants it
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from batch_layer.run import BATCH_SPARK_CONF
from lambdaline import kafka_broker, spark_cluster
from shared.platform.spark_session import spark_session
from shared.platform.topic_admin import create_topics
from shared.settings import Settings, get_settings
from speed_layer.job import SPEED_SPARK_CONF
from speed_layer.operator import operators_jar
from tests.spark_conf import CLASS_ARCHIVE, TEST_SPARK_CONF, make_class_archive

TIERS = {
    "fast": "not integration and not e2e and not fast_tier_time",
    "slow": "integration or e2e or fast_tier_time",
}
"""Each tier's marker expression: together they select every test once."""
FAST_TIER_RECORD = "lambdaline/fast-tier"
"""The pytest cache key of the last fast run's ``seconds``, ``tests`` and ``finished_at``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier", choices=sorted(TIERS), help="run one tier of the suite (instead of -m)"
    )


def pytest_configure(config: pytest.Config) -> None:
    tier = config.getoption("--tier")
    if tier is not None:
        if config.option.markexpr:
            raise pytest.UsageError("--tier chooses the tests by their marks: leave out -m")
        config.option.markexpr = TIERS[tier]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The class archive of Spark's drivers (``tests.spark_conf``), written once for the
    virtual environment: by the run's first process, before pytest-xdist starts its
    workers (its own hook of this name runs last)."""
    if hasattr(session.config, "workerinput"):
        return
    with tempfile.TemporaryDirectory(prefix="lambdaline-class-archive-") as scratch:
        seconds = make_class_archive(Path(scratch))
    if seconds:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"Spark's class archive written in {seconds:.0f} s: {CLASS_ARCHIVE}"
            )


CLUSTERS = frozenset({"kafka_cluster", "spark_standalone"})
"""The session fixtures that start clusters (three brokers; a Spark master and two workers)."""


def xdist_group(item: pytest.Item) -> str:
    """The group of a test under pytest-xdist's ``--dist loadgroup``, where each worker is a
    session of its own, with its own engines: the tests on :data:`CLUSTERS` go to one
    worker, and so do the unit tests on Spark (so each starts once); the others stay
    with their module (its module-scoped engines too)."""
    fixtures = set(item.fixturenames)
    if CLUSTERS & fixtures:
        return "clusters"
    if "spark" in fixtures and not any(item.iter_markers("integration")):
        return "unit-spark"
    return item.nodeid.split("::")[0]


GROUP_SECONDS = {
    "clusters": 570,
    "tests/integration/test_batch_layer.py": 240,
    "tests/integration/test_generations.py": 195,
    "tests/e2e/test_demo.py": 135,
    "tests/e2e/test_bench.py": 130,
    "tests/integration/test_serving.py": 115,
    "tests/integration/test_kafka_security.py": 105,
    "tests/integration/test_speed_restart.py": 80,
    "tests/integration/test_speed_reset.py": 65,
    "tests/integration/test_generated_merge.py": 60,
    "tests/integration/test_speed_layer.py": 50,
    "tests/integration/test_speed_provisional.py": 45,
    "tests/integration/test_adding_a_view.py": 45,
    "tests/integration/test_window_views.py": 45,
    "tests/integration/test_speed_state.py": 40,
}
"""The longest groups, about how many seconds each takes in ``make test`` (its JUnit report);
any other takes :data:`SECONDS_PER_TEST` a test. Only their order is used: under
loadgroup a worker that runs out of tests takes the next group, so the longest go
first and the shortest fill in at the end."""
SECONDS_PER_TEST = 8


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's :func:`xdist_group`; on an xdist worker (whose collection the
    controller schedules) the groups in the order of their length, longest first
    (:data:`GROUP_SECONDS`; ``make`` runs pytest-xdist with ``--no-loadscope-reorder``,
    which keeps this order rather than its own by number of tests).

    First of the hooks: a worker's pytest-xdist reads the marks in its own hook of this
    name (as a suffix of the node id), and would find none if it ran before this one
    (tests/unit/test_xdist_groups.py)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    if hasattr(config, "workerinput"):  # a worker's collection, which xdist schedules
        tests = Counter(xdist_group(item) for item in items)
        seconds = {
            group: GROUP_SECONDS.get(group, SECONDS_PER_TEST * count)
            for group, count in tests.items()
        }
        items.sort(key=lambda item: -seconds[xdist_group(item)])  # a stable sort


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    # the whole tier: every test of it (no paths or -k given), and not stopped half-way
    ran_whole = (
        exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        and config.args_source is pytest.Config.ArgsSource.TESTPATHS
        and not config.option.keyword
    )
    on_controller = not hasattr(config, "workerinput")  # pytest-xdist's workers have it
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    if config.getoption("--tier") == "fast" and ran_whole and on_controller and cache:
        record = {
            "seconds": round(_seconds_since_start(), 1),
            "tests": session.testscollected,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        cache.set(FAST_TIER_RECORD, record)


def _seconds_since_start() -> float:
    """This process's age: the interpreter's start-up and pytest's imports included."""
    # field 22 of stat (after the name in parentheses): the start, in clock ticks since boot
    started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local SparkSession for the whole run: small, UTC, no UI. Tests never stop it.

    It has the speed job's fair scheduler pools; jobs started outside a pool (the
    batch layer's, the tests' own) run in order, as under Spark's default. It has
    the batch job's SQL tuning too, so an in-process batch run plans its joins as
    ``lambdaline batch run`` does. Its queries are interpreted, on the JIT's first
    tier (``tests.spark_conf``): a test's few rows cost less so than
    compiled.
    """
    batch_sql = {
        key: value for key, value in BATCH_SPARK_CONF.items() if key.startswith("spark.sql.")
    }
    settings = Settings(
        state_dir=tmp_path_factory.mktemp("spark-session"),  # its scratch goes with the run
        spark_master="local[2]",
        spark_shuffle_partitions=2,
    )
    session = spark_session(
        settings,
        "lambdaline-tests",
        extra_jars=[operators_jar(settings.jvm_cache_dir)],
        extra_config={
            **batch_sql,
            **SPEED_SPARK_CONF,
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
            **TEST_SPARK_CONF,
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A running cluster of three KRaft brokers with every lambdaline topic (replication
    3), for the run: the cluster tests and the fault suite share it."""
    folder = tmp_path_factory.mktemp("kafka-cluster")
    with kafka_broker.ephemeral_broker(folder, brokers=3, kafka_heap="512m") as settings:
        create_topics(settings)
        yield settings
    assert not kafka_broker.status(settings).pids  # every node stopped, by its pid


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A Spark standalone cluster for the run: a master and two workers of two cores each,
    started and stopped by their pids."""
    ui = kafka_broker.free_ports(3)  # the master's web UI, then each worker's
    settings = Settings(
        state_dir=tmp_path_factory.mktemp("spark-cluster"),
        spark_cluster_port=kafka_broker.free_ports(1, avoid=frozenset(range(ui, ui + 3))),
        spark_cluster_ui_port=ui,
        spark_workers=2,
        spark_worker_cores=2,
    )
    state = spark_cluster.start(settings)
    try:
        assert state.alive_workers == 2 and len(state.pids) == 3
        yield settings
    finally:
        pids = spark_cluster.stop(settings)
        assert sorted(pids) == sorted(state.pids)
        assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


@pytest.fixture(autouse=True)
def _isolated_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Tests see default settings: no LAMBDALINE_* from the shell, an empty settings file."""
    for name in list(os.environ):
        if name.startswith("LAMBDALINE_"):
            monkeypatch.delenv(name)
    no_settings = tmp_path_factory.getbasetemp() / "empty.toml"
    no_settings.touch()
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(no_settings))
    get_settings.cache_clear()


@pytest.fixture
def settings() -> Settings:
    return Settings()
