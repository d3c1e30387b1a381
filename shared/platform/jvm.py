"""The JDK, the JVM jars from Maven Central (the Kafka broker, the Spark Kafka connector),
and the project's own Java, compiled against the Spark that pyspark ships.

``pom.xml`` beside this module names the versions (``deploy/jvm/pom.xml`` links
to it; it ships in the package, so ``pip install .`` has it too). Maven resolves
each profile into its own folder under ``jvm_cache_dir`` (their kafka-clients
versions differ and must not share a classpath). A folder is keyed by a hash of
the pom, so editing a version resolves afresh, and is filled atomically
(resolved into a temporary folder, then renamed), so an interrupted resolution
never leaves half a folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from enum import StrEnum
from pathlib import Path

POM_PATH = Path(__file__).with_name("pom.xml")
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
_UNREACHABLE_HINTS = (
    "Unknown host",
    "Could not transfer",
    "Connection refused",
    "Network is unreachable",
    "connect timed out",
    "Connect to",
)


class JavaCompileError(RuntimeError):
    """The project's Java did not compile; the message holds javac's errors."""


class JdkToolMissingError(RuntimeError):
    """No JDK tool (``java``, ``keytool``) where JAVA_HOME or the PATH says."""


def jdk_tool(name: str) -> str:
    """The JDK's ``name`` (``java``, ``keytool``): ``$JAVA_HOME/bin/<name>``, else the PATH's.

    The rule Spark's and Kafka's own launch scripts follow, so the broker, its
    certificates and Spark's JVM all run on the JDK that ``JAVA_HOME`` names.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        tool = Path(java_home) / "bin" / name
        if not os.access(tool, os.X_OK):
            raise JdkToolMissingError(f"`{name}` not found in JAVA_HOME={java_home} ({tool})")
        return str(tool)
    found = shutil.which(name)
    if found is None:
        raise JdkToolMissingError(
            f"`{name}` not found on the PATH: install a JDK 17+ (e.g. apt install "
            "openjdk-17-jdk) or set JAVA_HOME to one"
        )
    return found


class JvmProfile(StrEnum):
    KAFKA_BROKER = "kafka-broker"
    SPARK_KAFKA = "spark-kafka"


class JarResolutionError(RuntimeError):
    """Maven could not provide the jars; the message says why and what to do."""


def pom_properties(pom: Path = POM_PATH) -> dict[str, str]:
    """The <properties> of the pom (kafka.version, spark.version, ...)."""
    properties = ET.parse(pom).getroot().find("m:properties", _POM_NS)
    if properties is None:
        return {}
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in properties}


def jar_dir(cache_dir: Path, profile: JvmProfile, pom: Path = POM_PATH) -> Path:
    """Where one profile's jars are cached (``jvm_cache_dir``), by the pom's contents."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    return cache_dir / f"{profile.value}-{digest}"


def resolve_jars(cache_dir: Path, profile: JvmProfile, pom: Path = POM_PATH) -> list[Path]:
    """The jars of one profile, resolving them with Maven first if they are not cached."""
    target = jar_dir(cache_dir, profile, pom)
    if not target.is_dir():
        _run_maven(profile, pom, target)
    jars = sorted(target.glob("*.jar"))
    if not jars:
        raise JarResolutionError(f"{target} holds no jars; delete it and run `make setup`")
    return jars


def _run_maven(profile: JvmProfile, pom: Path, target: Path) -> None:
    if not pom.is_file():
        raise JarResolutionError(f"Maven file {pom} not found (reinstall lambdaline)")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            "Maven (`mvn`) is not installed; install it (e.g. apt install maven)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    command = [
        mvn, "-B", "-q", "-f", str(pom), f"-P{profile.value}",
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        output = (result.stdout + result.stderr).strip()
        errors = [line for line in output.splitlines() if "ERROR" in line][:3]
        summary = "\n".join(errors) or output[-2000:]
        if any(hint in output for hint in _UNREACHABLE_HINTS):
            raise JarResolutionError(
                f"cannot reach Maven Central to resolve the {profile.value} jars "
                f"(check the network or a Maven mirror in ~/.m2/settings.xml):\n{summary}"
            )
        raise JarResolutionError(f"Maven failed to resolve the {profile.value} jars:\n{summary}")
    try:
        staging.rename(target)
    except OSError:  # another process finished first; its folder is as good as ours
        shutil.rmtree(staging, ignore_errors=True)


def spark_kafka_jars(cache_dir: Path) -> list[Path]:
    """Connector jars to add to Spark: those pyspark does not already ship."""
    import pyspark

    shipped = {
        _artifact_name(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    }
    return [
        jar
        for jar in resolve_jars(cache_dir, JvmProfile.SPARK_KAFKA)
        if _artifact_name(jar) not in shipped
    ]


def _artifact_name(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d+(\.\d+)+.*$", "", jar.stem)


def pyspark_jars_dir() -> Path:
    """The jars of the Spark that pyspark runs (its JVM's classpath)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def compiled_jar(sources: Path, cache_dir: Path, name: str) -> Path:
    """The jar of the Java sources under ``sources``, compiled against pyspark's Spark.

    Built with the JDK's ``javac`` and ``jar`` (``jdk_tool``): the classpath is the
    jars pyspark ships, so nothing is downloaded and the classes match the Spark they
    run in. Cached in ``cache_dir`` by a hash of the sources and pyspark's version,
    written atomically (built in a temporary folder, then renamed), so an edit builds
    afresh and an interrupted build leaves nothing half-made.
    """
    import pyspark

    files = sorted(sources.rglob("*.java"))
    if not files:
        raise JavaCompileError(f"no Java sources under {sources}")
    digest = hashlib.sha256(pyspark.__version__.encode())
    for file in files:
        digest.update(str(file.relative_to(sources)).encode())
        digest.update(file.read_bytes())
    jar = cache_dir / f"{name}-{digest.hexdigest()[:12]}.jar"
    if jar.is_file():
        return jar
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir))
    try:
        classes = staging / "classes"
        compile_command = [
            jdk_tool("javac"), "--release", "17", "-nowarn", "-Xlint:-path",
            "-cp", str(pyspark_jars_dir() / "*"), "-d", str(classes), *map(str, files),
        ]  # fmt: skip
        result = subprocess.run(compile_command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise JavaCompileError(
                f"javac failed on {sources}:\n{(result.stdout + result.stderr).strip()[-3000:]}"
            )
        built = staging / jar.name
        subprocess.run(
            [jdk_tool("jar"), "cf", str(built), "-C", str(classes), "."],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        built.rename(jar)  # another process's jar of the same sources is as good as ours
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return jar
