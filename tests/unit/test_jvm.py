from __future__ import annotations

import zipfile
from pathlib import Path

import pyspark
import pytest

from shared.platform.jvm import (
    JavaCompileError,
    JdkToolMissingError,
    _artifact_name,
    compiled_jar,
    jdk_tool,
    pom_properties,
)


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


HELLO = """package lambdaline.test;

public final class Hello {
  public static org.apache.spark.sql.types.StructType schema() {
    return new org.apache.spark.sql.types.StructType().add("greeting", "string");
  }
}
"""


def test_java_sources_compile_against_pysparks_spark_once_per_content(tmp_path: Path) -> None:
    sources, cache = tmp_path / "src", tmp_path / "cache"
    (sources / "lambdaline" / "test").mkdir(parents=True)
    source = sources / "lambdaline" / "test" / "Hello.java"
    source.write_text(HELLO)

    jar = compiled_jar(sources, cache, "hello")
    with zipfile.ZipFile(jar) as built:
        assert "lambdaline/test/Hello.class" in built.namelist()
    assert compiled_jar(sources, cache, "hello") == jar  # cached: the same file, not rebuilt
    assert [path.name for path in cache.iterdir()] == [jar.name]  # no staging left behind

    source.write_text(HELLO.replace('"greeting"', '"salute"'))
    assert compiled_jar(sources, cache, "hello") != jar  # an edit builds afresh


def test_java_that_does_not_compile_is_named_with_javacs_error(tmp_path: Path) -> None:
    (tmp_path / "Broken.java").write_text("public final class Broken { int x = ; }\n")
    with pytest.raises(
        JavaCompileError, match=r"(?s)javac failed on .*Broken\.java.*illegal start"
    ):
        compiled_jar(tmp_path, tmp_path / "cache", "broken")
    assert list((tmp_path / "cache").iterdir()) == []
    with pytest.raises(JavaCompileError, match="no Java sources under"):
        compiled_jar(tmp_path / "cache", tmp_path / "cache", "none")
