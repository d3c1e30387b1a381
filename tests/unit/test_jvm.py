from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from shared.platform.jvm import JdkToolMissingError, _artifact_name, jdk_tool, pom_properties


def test_connector_version_matches_installed_pyspark() -> None:
    assert pom_properties()["spark.version"] == pyspark.__version__


def test_kafka_broker_is_a_4x_release() -> None:
    assert pom_properties()["kafka.version"].startswith("4.")


def test_artifact_names_drop_only_the_version() -> None:
    assert (
        _artifact_name(Path("spark-sql-kafka-0-10_2.13-4.0.0.jar")) == "spark-sql-kafka-0-10_2.13"
    )
    assert _artifact_name(Path("kafka-clients-3.9.0.jar")) == "kafka-clients"
    assert _artifact_name(Path("zstd-jni-1.5.7-7.jar")) == "zstd-jni"


def _fake_jdk(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    for name in ("java", "keytool"):
        (root / "bin" / name).write_text("#!/bin/sh\n")
        (root / "bin" / name).chmod(0o755)
    return root


def test_jdk_tools_come_from_java_home_when_it_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jdk = _fake_jdk(tmp_path / "jdk-25")
    monkeypatch.setenv("JAVA_HOME", str(jdk))
    monkeypatch.setenv("PATH", str(_fake_jdk(tmp_path / "on-path") / "bin"))
    assert jdk_tool("java") == f"{tmp_path}/jdk-25/bin/java"
    assert jdk_tool("keytool") == f"{tmp_path}/jdk-25/bin/keytool"


def test_jdk_tools_come_from_the_path_without_java_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(_fake_jdk(tmp_path / "on-path") / "bin"))
    assert jdk_tool("java") == f"{tmp_path}/on-path/bin/java"


def test_a_java_home_without_the_tool_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "not-a-jdk"))
    with pytest.raises(JdkToolMissingError, match=r"`java` not found in JAVA_HOME=.*not-a-jdk"):
        jdk_tool("java")


def test_no_jdk_on_the_path_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JdkToolMissingError, match="install a JDK 17"):
        jdk_tool("keytool")
