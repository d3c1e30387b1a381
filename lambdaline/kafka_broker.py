"""The embedded Apache Kafka broker: one KRaft node run as a background JVM.

``start`` writes the broker's configuration from settings, formats the KRaft
storage once, launches ``kafka.Kafka`` with a capped heap, records its pid and
waits until it answers on ``kafka_bootstrap``. ``stop`` signals exactly that pid
and waits for it to go. Everything lives under ``<state_dir>/kafka``: ``data/``
(the log dirs, kept across restarts), ``server.properties`` (readable by its owner
only: it may hold the SASL password), ``broker.pid``, and with TLS ``tls/`` (the
broker's keystore and certificate, see :func:`certificate`);
the broker's output goes to ``<state_dir>/logs/kafka.log``.

On a cluster you point ``LAMBDALINE_KAFKA_BOOTSTRAP`` at real brokers and never
call this module.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from shared.platform.jvm import JdkToolMissingError, JvmProfile, jdk_tool, resolve_jars
from shared.platform.kafka_admin import admin_client, port_open
from shared.platform.kafka_security import jaas_config
from shared.settings import KafkaSettings, Settings

NODE_ID = 1
_MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_KILL_WAIT_S = 30.0

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.controller.name = org.apache.kafka.controller
logger.controller.level = warn
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


class BrokerError(RuntimeError):
    """The broker could not be started or stopped; the message says why."""


@dataclass(frozen=True)
class BrokerPaths:
    root: Path
    data: Path
    config: Path
    log4j: Path
    pid_file: Path
    log_file: Path
    keystore: Path
    keystore_password: Path
    certificate: Path

    @classmethod
    def of(cls, settings: Settings) -> BrokerPaths:
        root = settings.kafka_dir
        return cls(
            root=root,
            data=root / "data",
            config=root / "server.properties",
            log4j=root / "log4j2.properties",
            pid_file=root / "broker.pid",
            log_file=settings.logs_dir / "kafka.log",
            keystore=root / "tls" / "broker.p12",
            keystore_password=root / "tls" / "broker.p12.password",
            certificate=root / "tls" / "broker.pem",
        )


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    answering: bool
    paths: BrokerPaths


def server_properties(settings: Settings, paths: BrokerPaths) -> str:
    """A single-node KRaft broker+controller with replication factors of one.

    Clients reach it on one listener that speaks ``kafka_security_protocol``
    (see :func:`security_properties`); the controller's stays PLAINTEXT, on the
    same host.
    """
    host, port = settings.kafka.bootstrap_host, settings.kafka.bootstrap_port
    controller = f"{host}:{settings.kafka.controller_port}"
    protocol = settings.kafka.security_protocol
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{controller}",
        "listeners": f"{protocol}://{host}:{port},CONTROLLER://{controller}",
        "advertised.listeners": f"{protocol}://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": protocol,
        "listener.security.protocol.map": f"{protocol}:{protocol},CONTROLLER:PLAINTEXT",
        **security_properties(settings.kafka, paths),
        "log.dirs": str(paths.data.resolve()),
        "num.partitions": str(settings.kafka.partitions),
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(max(settings.kafka.partitions, 1)),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "message.max.bytes": str(8 * 1024 * 1024),
        # The generator runs simulated time, possibly ahead of the wall clock; Kafka 4
        # would otherwise reject record timestamps more than an hour in the future.
        "log.message.timestamp.after.max.ms": str(2**63 - 1),
    }
    return "".join(f"{key}={_escape(value)}\n" for key, value in properties.items())


def _escape(value: str) -> str:
    """A value as Java's ``Properties.load`` reads it back.

    It reads a backslash as an escape, ends a value at a line break and reads
    the file as ISO-8859-1: a password holding any of these came back changed.
    """
    escaped = []
    for char in value:
        if char == "\\":
            escaped.append("\\\\")
        elif char in "\n\r" or not " " <= char <= "~":
            escaped.extend(f"\\u{unit:04x}" for unit in _utf16_units(char))
        else:
            escaped.append(char)
    return "".join(escaped)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def security_properties(kafka: KafkaSettings, paths: BrokerPaths) -> dict[str, str]:
    """The client listener's SASL and TLS configuration, from the client settings.

    SASL: the one user of the settings, by PLAIN (its password in the broker's
    configuration, where Kafka's PLAIN reads it). TLS: a certificate of the
    broker's own (:func:`certificate`), which clients trust through
    ``kafka_ssl_cafile``; with ``kafka_ssl_certfile``, mutual TLS: every client
    must present a certificate, and the broker trusts the one of the settings.
    """
    properties: dict[str, str] = {}
    listener = kafka.security_protocol.lower()
    if kafka.uses_sasl:
        username, password = kafka.sasl_username, kafka.sasl_password
        assert username is not None and password is not None  # see Settings
        secret = password.get_secret_value()
        properties |= {
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            f"listener.name.{listener}.plain.sasl.jaas.config": jaas_config(
                "PLAIN", {"username": username, "password": secret, f"user_{username}": secret}
            ),
        }
    if kafka.uses_tls:
        # the broker is its own inter-broker client, and checks at start that it
        # trusts itself; with a client certificate in the settings it asks every
        # client for one, and trusts that one. Prefixed by the listener: Kafka
        # applies an unprefixed ssl.client.auth to SSL listeners only, and a
        # SASL_SSL one would let a client without a certificate in (KIP-684)
        trusted = [paths.certificate.read_text()]
        if kafka.ssl_certfile is not None:
            trusted.append(kafka.ssl_certfile.read_text())
            properties[f"listener.name.{listener}.ssl.client.auth"] = "required"
        properties |= {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(paths.keystore.resolve()),
            "ssl.keystore.password": paths.keystore_password.read_text().strip(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": "".join(text.strip() + "\n" for text in trusted),
        }
    return properties


def check_security_settings(kafka: KafkaSettings) -> None:
    """Raise BrokerError if the embedded broker cannot serve the security settings."""
    if kafka.uses_sasl:
        if kafka.sasl_mechanism != "PLAIN":
            raise BrokerError(
                "the embedded broker offers SASL by PLAIN only, not "
                f"{kafka.sasl_mechanism} (SCRAM keeps its credentials in the cluster's "
                "metadata); use PLAIN with it, "
                "or point LAMBDALINE_KAFKA_BOOTSTRAP at a cluster that offers SCRAM"
            )
        if not re.fullmatch(r"[A-Za-z0-9._-]+", kafka.sasl_username or ""):
            raise BrokerError(
                f"the embedded broker takes SASL user names of letters, digits, '.', '_' and "
                f"'-' (it names them in its configuration), not {kafka.sasl_username!r}"
            )


def certificate(settings: Settings) -> Path:
    """The PEM file of the embedded broker's TLS certificate, made on first call.

    ``keytool`` (part of the JDK) makes a self-signed certificate for the
    bootstrap host, valid ten years, in a PKCS12 keystore under
    ``<state_dir>/kafka/tls``, and writes the certificate as PEM beside it.
    Clients trust it through ``kafka_ssl_cafile``.
    """
    paths = BrokerPaths.of(settings)
    if not paths.keystore.exists():
        paths.keystore.parent.mkdir(parents=True, exist_ok=True)
        _write_private(paths.keystore_password, secrets.token_urlsafe(24) + "\n")
        host = settings.kafka.bootstrap_host
        names = {f"ip:{host}" if _is_ip(host) else f"dns:{host}", "dns:localhost", "ip:127.0.0.1"}
        store = ["-keystore", str(paths.keystore), "-storetype", "PKCS12"]
        store += ["-storepass:file", str(paths.keystore_password)]  # not on a command line
        _keytool(
            "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048",
            "-validity", "3650", "-dname", f"CN={host}, O=lambdaline embedded broker",
            "-ext", f"SAN={','.join(sorted(names))}", "-ext", "BC:c=ca:true", *store,
        )  # fmt: skip
        _keytool("-exportcert", "-rfc", "-alias", "broker", "-file", str(paths.certificate), *store)
    return paths.certificate


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read: it holds a password."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


def _check_trusted(settings: Settings, paths: BrokerPaths) -> None:
    """Refuse a start whose clients would not trust the broker's certificate, naming it."""
    pem = certificate(settings).read_text().strip()
    cafile = settings.kafka.ssl_cafile
    if cafile is None or pem not in cafile.read_text():
        now = f" (now {cafile}, which does not hold it)" if cafile else ""
        raise BrokerError(
            "the embedded broker presents a certificate of its own, which clients trust only "
            f"through kafka_ssl_cafile: set LAMBDALINE_KAFKA_SSL_CAFILE="
            f"{paths.certificate.resolve()}{now}"
        )


def _check_unchanged(settings: Settings, paths: BrokerPaths, pid: int) -> None:
    """Refuse to call a running broker started if it runs with other settings than these.

    A broker reads its configuration once, at start: a listener, password or
    heap changed since would otherwise be reported as running and then refuse
    every client. The comparison is of what :func:`start` would write, by
    property name (a value may be a password), and of the heap.
    """
    check_security_settings(settings.kafka)
    if settings.kafka.uses_tls:
        certificate(settings)  # the one a restart would use; it names it in the properties
    try:
        running = _properties(paths.config.read_text())
    except FileNotFoundError:
        return
    wanted = _properties(server_properties(settings, paths))
    changed = sorted(
        key for key in running.keys() | wanted.keys() if running.get(key) != wanted.get(key)
    )
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    if f"-Xmx{settings.kafka.heap}" not in cmdline:
        changed.append("heap (kafka_heap)")
    if changed:
        named = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        raise BrokerError(
            f"the embedded broker (pid {pid}) runs with other settings than these "
            f"(they differ in {named}); it reads them at start: "
            "`lambdaline kafka stop`, then `lambdaline kafka start`"
        )


def _properties(text: str) -> dict[str, str]:
    """``key=value`` lines as :func:`server_properties` writes them (values still escaped)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _keytool(*arguments: str) -> None:
    result = subprocess.run(
        [_jdk("keytool"), *arguments], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BrokerError(f"keytool {arguments[0]} failed:\n{result.stdout}{result.stderr}")


def _jdk(tool: str) -> str:
    try:
        return jdk_tool(tool)
    except JdkToolMissingError as missing:
        raise BrokerError(str(missing)) from None


def _classpath(settings: Settings) -> str:
    return os.pathsep.join(
        str(jar) for jar in resolve_jars(settings.jvm_cache_dir, JvmProfile.KAFKA_BROKER)
    )


def _jvm_options(kafka: KafkaSettings, paths: BrokerPaths) -> list[str]:
    return [
        f"-Xmx{kafka.heap}",
        "-Xms256m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={paths.log4j.resolve()}",
        f"-Dkafka.logs.dir={paths.log_file.parent.resolve()}",
    ]


def _read_pid(paths: BrokerPaths) -> int | None:
    try:
        return int(paths.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _is_our_broker(pid: int, paths: BrokerPaths) -> bool:
    """True if pid is alive and is the broker started with our config (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    if state == "Z":  # exited, waiting to be reaped by us
        _reap(pid)
        return False
    return _MAIN_CLASS.encode() in cmdline and str(paths.config.resolve()).encode() in cmdline


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _gone(pid: int, paths: BrokerPaths) -> bool:
    """True once the broker has fully exited.

    Our own child counts as gone only once reaped: an exiting JVM has already
    lost its command line while the kernel is still tearing it down, so
    "not our broker any more" alone would leave a zombie behind.
    """
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: whoever started it reaps it
        return not _is_our_broker(pid, paths)
    return reaped == pid


def _wait_gone(pid: int, paths: BrokerPaths, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid, paths):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _answers(kafka: KafkaSettings, timeout_ms: int = 2000) -> bool:
    """True if the cluster answers a cluster description."""
    try:
        admin = admin_client(kafka, client_id="lambdaline-probe", timeout_ms=timeout_ms)
    except (KafkaConnectionError, KafkaTimeoutError):
        return False
    try:
        admin.describe_cluster()
        return True
    except KafkaError:
        return False
    finally:
        admin.close()


def _log_tail(paths: BrokerPaths, lines: int = 20) -> str:
    try:
        return "\n".join(paths.log_file.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def new_cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's own ``Uuid.randomUuid`` makes them.

    URL-safe base64 of 16 random bytes, never starting with ``-``: the storage
    tool would read such an id as an option (1 start in 64 did, before this).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_storage(settings: Settings, paths: BrokerPaths) -> None:
    """Format the KRaft log dir once; a formatted dir keeps its data and cluster id."""
    if (paths.data / "meta.properties").exists():
        return
    cluster_id = new_cluster_id()
    command = [
        _jdk("java"), f"-Xmx{settings.kafka.heap}", "-cp", _classpath(settings), _STORAGE_TOOL,
        "format", "-t", cluster_id, "-c", str(paths.config.resolve()),
    ]  # fmt: skip
    env = {**os.environ, "KAFKA_LOG4J_OPTS": f"-Dlog4j2.configurationFile={paths.log4j}"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise BrokerError(f"formatting KRaft storage failed:\n{result.stdout}{result.stderr}")


def is_running(settings: Settings, pid: int) -> bool:
    """True while ``pid`` is this state folder's broker (a cheap check: /proc only)."""
    return _is_our_broker(pid, BrokerPaths.of(settings))


def start(settings: Settings) -> BrokerStatus:
    """Start the broker if it is not running; return once it answers. Idempotent."""
    paths = BrokerPaths.of(settings)
    pid = _read_pid(paths)
    if pid is not None and _is_our_broker(pid, paths):
        _check_unchanged(settings, paths, pid)
        return status(settings)
    paths.pid_file.unlink(missing_ok=True)
    host, port = settings.kafka.bootstrap_host, settings.kafka.bootstrap_port
    for taken in (port, settings.kafka.controller_port):
        if port_open(host, taken):
            raise BrokerError(
                f"{host}:{taken} is already in use by another process; stop it or set "
                "LAMBDALINE_KAFKA_BOOTSTRAP / LAMBDALINE_KAFKA_CONTROLLER_PORT to free ports"
            )
    check_security_settings(settings.kafka)
    for folder in (paths.root, paths.data, paths.log_file.parent):
        folder.mkdir(parents=True, exist_ok=True)
    if settings.kafka.uses_tls:
        _check_trusted(settings, paths)
    _write_private(paths.config, server_properties(settings, paths))
    paths.log4j.write_text(_LOG4J2)
    _format_storage(settings, paths)

    command = [_jdk("java"), *_jvm_options(settings.kafka, paths), "-cp", _classpath(settings)]
    command += [_MAIN_CLASS, str(paths.config.resolve())]
    with paths.log_file.open("ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the caller's terminal must not reach it
        )  # fmt: skip
    paths.pid_file.write_text(f"{process.pid}\n")

    deadline = time.monotonic() + settings.kafka.start_timeout.total_seconds()
    while time.monotonic() < deadline:
        if process.poll() is not None:
            paths.pid_file.unlink(missing_ok=True)
            raise BrokerError(
                f"the broker exited with code {process.returncode} during start-up; "
                f"last lines of {paths.log_file}:\n{_log_tail(paths)}"
            )
        if _answers(settings.kafka):
            return status(settings)
        time.sleep(0.5)
    _terminate(process.pid, paths, grace_seconds=10)
    raise BrokerError(
        f"the broker did not answer on {settings.kafka.bootstrap} within "
        f"{settings.kafka.start_timeout}; last lines of {paths.log_file}:\n{_log_tail(paths)}"
    )


def _terminate(pid: int, paths: BrokerPaths, grace_seconds: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, paths, grace_seconds):
        if _is_our_broker(pid, paths):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not _wait_gone(pid, paths, _KILL_WAIT_S):
            raise BrokerError(f"the broker (pid {pid}) did not exit after SIGKILL")
    paths.pid_file.unlink(missing_ok=True)


def stop(settings: Settings, grace_seconds: float = 30.0) -> int | None:
    """Stop the broker started by :func:`start` (by its pid) and wait; return the pid or None."""
    paths = BrokerPaths.of(settings)
    pid = _read_pid(paths)
    if pid is None or not _is_our_broker(pid, paths):
        paths.pid_file.unlink(missing_ok=True)
        return None
    _terminate(pid, paths, grace_seconds)
    return pid


def status(settings: Settings) -> BrokerStatus:
    paths = BrokerPaths.of(settings)
    pid = _read_pid(paths)
    running = pid is not None and _is_our_broker(pid, paths)
    return BrokerStatus(
        running=running,
        pid=pid if running else None,
        bootstrap=settings.kafka.bootstrap,
        answering=_answers(settings.kafka),
        paths=paths,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def ephemeral_broker(state_dir: Path, **overrides: Any) -> Iterator[Settings]:
    """A broker of its own on free ports under state_dir, stopped (by pid) on exit.

    For tests and benchmarks: it never touches the configured broker or ports.
    With TLS, its clients trust its own certificate, whatever CA file the
    environment names.
    """
    settings = Settings.model_validate(
        {
            "state_dir": state_dir,
            "kafka_bootstrap": f"127.0.0.1:{free_port()}",
            "kafka_controller_port": free_port(),
            **overrides,
        }
    )
    if settings.kafka.uses_tls:
        settings = settings.updated(kafka_ssl_cafile=certificate(settings))
    start(settings)
    try:
        yield settings
    finally:
        stop(settings)
