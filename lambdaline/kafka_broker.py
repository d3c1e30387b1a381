"""The embedded Apache Kafka cluster: one or more KRaft nodes, each a background JVM.

Every node is both broker and controller (``kafka_brokers`` of them, default one).
Node i listens for clients on the bootstrap port + i - 1 and for its controller
quorum on ``kafka_controller_port`` + i - 1, all on the bootstrap host. With three
or more nodes, topics are replicated three times and a write needs two in-sync
replicas (``min.insync.replicas`` 2), so an acknowledged record survives the loss
of any one broker.

``start`` writes each node's configuration from settings, formats its KRaft
storage once (every node with the same cluster id), launches the nodes that do not
run with capped heaps, records their pids and waits until every node has joined.
It is idempotent, so it also restarts a node that died. ``stop`` signals exactly
those pids and waits for them to go. Everything lives under ``<state_dir>/kafka``:
per node ``node-<i>/`` with ``data/`` (the log dirs, kept across restarts),
``server.properties`` (readable by its owner only: it may hold the SASL password)
and ``broker.pid``; with TLS, ``tls/`` (the brokers' shared keystore and
certificate, see :func:`certificate`). Node i's output goes to
``<state_dir>/logs/kafka-<i>.log``.

On a cluster of your own you point ``LAMBDALINE_KAFKA_BOOTSTRAP`` at its brokers
and never call this module.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
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
from shared.platform.process_groups import runs_as
from shared.platform.topic_admin import replication
from shared.settings import KafkaSettings, Settings

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
    """The cluster could not be started or stopped; the message says why."""


@dataclass(frozen=True)
class Node:
    """One KRaft node of the embedded cluster: broker and controller."""

    id: int
    host: str
    port: int
    controller_port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def controller(self) -> str:
        return f"{self.host}:{self.controller_port}"


def nodes(kafka: KafkaSettings) -> list[Node]:
    """The embedded cluster's nodes, ids from 1, on consecutive ports."""
    host, port = kafka.bootstrap_host, kafka.bootstrap_port
    return [Node(i + 1, host, port + i, kafka.controller_port + i) for i in range(kafka.brokers)]


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
    def of(cls, settings: Settings, node: int = 1) -> BrokerPaths:
        root = settings.kafka_dir / f"node-{node}"
        tls = settings.kafka_dir / "tls"  # one certificate for every node: same host
        return cls(
            root=root,
            data=root / "data",
            config=root / "server.properties",
            log4j=root / "log4j2.properties",
            pid_file=root / "broker.pid",
            log_file=settings.logs_dir / f"kafka-{node}.log",
            keystore=tls / "broker.p12",
            keystore_password=tls / "broker.p12.password",
            certificate=tls / "broker.pem",
        )


@dataclass(frozen=True)
class NodeStatus:
    node: Node
    pid: int | None
    """Its pid while it runs, else None."""
    paths: BrokerPaths

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True, order=True)
class UnderReplicated:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class BrokerStatus:
    """The embedded cluster as its nodes' pid files, the quorum and the cluster say."""

    nodes: list[NodeStatus]
    bootstrap: str
    registered: frozenset[int] | None
    """Ids of the brokers the cluster lists; None if it does not answer."""
    controller: int | None
    """The node that leads the KRaft quorum (the active controller), as its log says."""
    under_replicated: list[UnderReplicated]

    @property
    def running(self) -> bool:
        """True if every node runs."""
        return all(node.running for node in self.nodes)

    @property
    def answering(self) -> bool:
        return self.registered is not None

    @property
    def pids(self) -> list[int]:
        return [node.pid for node in self.nodes if node.pid is not None]

    @property
    def pid(self) -> int | None:
        """The first node's pid (a single broker's)."""
        return self.nodes[0].pid

    @property
    def paths(self) -> BrokerPaths:
        """The first node's paths (a single broker's)."""
        return self.nodes[0].paths


def server_properties(settings: Settings, paths: BrokerPaths, node: int = 1) -> str:
    """Node ``node`` of a KRaft cluster of ``kafka_brokers`` broker+controller nodes.

    Clients reach it on one listener that speaks ``kafka_security_protocol``
    (see :func:`security_properties`), which the brokers also use among
    themselves; the controllers' stays PLAINTEXT, on the same host. Replication
    factors and ``min.insync.replicas``: :func:`replication`.
    """
    cluster = nodes(settings.kafka)
    this = cluster[node - 1]
    protocol = settings.kafka.security_protocol
    factor, min_isr = (str(value) for value in replication(len(cluster)))
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(this.id),
        "controller.quorum.voters": ",".join(f"{n.id}@{n.controller}" for n in cluster),
        "listeners": f"{protocol}://{this.address},CONTROLLER://{this.controller}",
        "advertised.listeners": f"{protocol}://{this.address}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": protocol,
        "listener.security.protocol.map": f"{protocol}:{protocol},CONTROLLER:PLAINTEXT",
        **security_properties(settings.kafka, paths),
        "log.dirs": str(paths.data.resolve()),
        "num.partitions": str(settings.kafka.partitions),
        "auto.create.topics.enable": "false",
        "default.replication.factor": factor,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": factor,
        "offsets.topic.num.partitions": str(max(settings.kafka.partitions, 1)),
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": factor,
        "share.coordinator.state.topic.min.isr": min_isr,
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


def _check_unchanged(settings: Settings, paths: BrokerPaths, pid: int, node: int) -> None:
    """Refuse to call a running node started if it runs with other settings than these.

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
    wanted = _properties(server_properties(settings, paths, node))
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
            f"node {node} of the embedded cluster (pid {pid}) runs with other settings than these "
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
    return runs_as(pid, _MAIN_CLASS, str(paths.config.resolve()))


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


def _registered(kafka: KafkaSettings, timeout_ms: int = 2000) -> frozenset[int] | None:
    """Ids of the brokers the cluster lists (joined and caught up), or None if it does
    not answer."""
    try:
        admin = admin_client(kafka, client_id="lambdaline-probe", timeout_ms=timeout_ms)
    except (KafkaConnectionError, KafkaTimeoutError):
        return None
    try:
        brokers = admin.describe_cluster()["brokers"]
        return frozenset(b["broker_id"] for b in brokers if not b.get("is_fenced"))
    except KafkaError:
        return None
    finally:
        admin.close()


def _under_replicated(kafka: KafkaSettings) -> list[UnderReplicated]:
    """Partitions with a replica out of sync (or down), across every topic."""
    try:
        admin = admin_client(kafka, client_id="lambdaline-probe", timeout_ms=5000)
    except (KafkaConnectionError, KafkaTimeoutError):
        return []
    try:
        topics = admin.describe_topics()
    except KafkaError:
        return []
    finally:
        admin.close()
    return sorted(
        UnderReplicated(
            topic["name"],
            part["partition_index"],
            tuple(part["replica_nodes"]),
            tuple(part["isr_nodes"]),
        )
        for topic in topics
        for part in topic["partitions"]
        if set(part["replica_nodes"]) - set(part["isr_nodes"])
    )


def _quorum_leader(statuses: list[NodeStatus]) -> int | None:
    """The KRaft quorum's leader (the active controller) as the running nodes record it.

    Each node keeps the last leader and epoch it saw in ``quorum-state``; the
    highest epoch is the latest. (A broker's DescribeCluster answer names a random
    broker as controller in KRaft mode, so it cannot say.)
    """
    latest: tuple[int, int] | None = None
    for status in statuses:
        if not status.running:
            continue
        state_file = status.paths.data / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(state_file.read_text())
        except (FileNotFoundError, ValueError):
            continue
        leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
        if leader >= 0 and (latest is None or epoch > latest[0]):
            latest = (epoch, leader)
    return None if latest is None else latest[1]


def _log_tail(paths: BrokerPaths, lines: int = 20) -> str:
    try:
        return "\n".join(paths.log_file.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def new_cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's own ``Uuid.randomUuid`` makes them.

    URL-safe base64 of 16 random bytes, never starting with ``-``: the storage
    tool would read such an id as an option (1 random id in 64 starts with it).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_storage(settings: Settings, paths: BrokerPaths, cluster_id: str) -> None:
    """Format a node's KRaft log dir once; a formatted dir keeps its data and cluster id."""
    if (paths.data / "meta.properties").exists():
        return
    command = [
        _jdk("java"), f"-Xmx{settings.kafka.heap}", "-cp", _classpath(settings), _STORAGE_TOOL,
        "format", "-t", cluster_id, "-c", str(paths.config.resolve()),
    ]  # fmt: skip
    env = {**os.environ, "KAFKA_LOG4J_OPTS": f"-Dlog4j2.configurationFile={paths.log4j}"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise BrokerError(f"formatting KRaft storage failed:\n{result.stdout}{result.stderr}")


def _cluster_id(settings: Settings) -> str:
    """The id every node is formatted with: that of a node formatted before, else new.

    A node whose data was lost is formatted again with the same id and rejoins;
    one with another id would be refused by the quorum.
    """
    for meta in sorted(settings.kafka_dir.glob("node-*/data/meta.properties")):
        cluster_id = _properties(meta.read_text()).get("cluster.id")
        if cluster_id:
            return cluster_id
    return new_cluster_id()


def _node_folders(settings: Settings) -> list[int]:
    """Ids of the nodes with a folder under ``kafka_dir``, whatever the settings say now."""
    ids = []
    for folder in settings.kafka_dir.glob("node-*"):
        suffix = folder.name.removeprefix("node-")
        if suffix.isdigit():
            ids.append(int(suffix))
    return sorted(ids)


def _running_pid(paths: BrokerPaths) -> int | None:
    pid = _read_pid(paths)
    return pid if pid is not None and _is_our_broker(pid, paths) else None


def _formatted_nodes(settings: Settings) -> list[int]:
    """Ids of the nodes whose storage is formatted under this state folder."""
    return [
        node for node in _node_folders(settings)
        if (BrokerPaths.of(settings, node).data / "meta.properties").exists()
    ]  # fmt: skip


def cluster_settings(settings: Settings) -> Settings:
    """These settings with ``kafka_brokers`` raised to the cluster formatted under this
    state folder: `kafka status`, `start` and `stop` see a cluster made with ``--brokers``."""
    formatted = _formatted_nodes(settings)
    if not formatted or max(formatted) <= settings.kafka.brokers:
        return settings
    return settings.updated(kafka_brokers=max(formatted))


def is_running(settings: Settings, pid: int) -> bool:
    """True while ``pid`` is a node of this state folder's cluster (a cheap check: /proc only)."""
    folders = _node_folders(settings)
    return any(_is_our_broker(pid, BrokerPaths.of(settings, node)) for node in folders)


def _check_ports(settings: Settings, cluster: list[Node], starting: list[Node]) -> None:
    clients = {node.port for node in cluster}
    controllers = {node.controller_port for node in cluster}
    if clients & controllers:
        raise BrokerError(
            f"the embedded cluster's client ports ({_ports(clients)}) and controller ports "
            f"({_ports(controllers)}) overlap: set LAMBDALINE_KAFKA_CONTROLLER_PORT at least "
            f"{len(cluster)} away from the bootstrap port"
        )
    for node in starting:
        for taken in (node.port, node.controller_port):
            if port_open(node.host, taken):
                raise BrokerError(
                    f"{node.host}:{taken} (node {node.id}) is already in use by another process; "
                    "stop it or set LAMBDALINE_KAFKA_BOOTSTRAP / "
                    "LAMBDALINE_KAFKA_CONTROLLER_PORT to free ports"
                )


def _ports(ports: set[int]) -> str:
    low, high = min(ports), max(ports)
    return str(low) if low == high else f"{low}-{high}"


def start(settings: Settings) -> BrokerStatus:
    """Start every node of the cluster that does not run; return once every node has
    joined. Idempotent: it restarts a node that died and leaves running ones alone."""
    check_security_settings(settings.kafka)
    cluster = nodes(settings.kafka)
    formatted = _formatted_nodes(settings)
    if formatted and max(formatted) > len(cluster):
        raise BrokerError(
            f"the cluster under {settings.kafka_dir} has {max(formatted)} nodes, and a KRaft "
            f"quorum keeps its voters: start it with --brokers {max(formatted)} "
            f"(LAMBDALINE_KAFKA_BROKERS={max(formatted)}), or delete {settings.kafka_dir} "
            f"for a new cluster of {len(cluster)}"
        )
    starting = []
    for node in cluster:
        paths = BrokerPaths.of(settings, node.id)
        pid = _running_pid(paths)
        if pid is None:
            paths.pid_file.unlink(missing_ok=True)
            starting.append(node)
        else:
            _check_unchanged(settings, paths, pid, node.id)
    _check_ports(settings, cluster, starting)
    if not starting:
        return status(settings)
    for folder in (settings.kafka_dir, settings.logs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    if settings.kafka.uses_tls:
        _check_trusted(settings, BrokerPaths.of(settings))
    cluster_id = _cluster_id(settings)
    launched: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for node in starting:  # all before any waits: a quorum needs a majority up
            launched[node.id] = _launch(settings, node, cluster_id)
        joined = _wait_joined(settings, cluster, launched)
    except BaseException:
        for node_id, process in launched.items():
            _terminate(process.pid, BrokerPaths.of(settings, node_id), grace_seconds=10)
        raise
    # what the cluster listed as it joined: asked again at once, a node just up may not
    # answer yet
    return status(settings, registered=joined)


def _launch(settings: Settings, node: Node, cluster_id: str) -> subprocess.Popen[bytes]:
    paths = BrokerPaths.of(settings, node.id)
    paths.data.mkdir(parents=True, exist_ok=True)
    _write_private(paths.config, server_properties(settings, paths, node.id))
    paths.log4j.write_text(_LOG4J2)
    _format_storage(settings, paths, cluster_id)
    command = [_jdk("java"), *_jvm_options(settings.kafka, paths), "-cp", _classpath(settings)]
    command += [_MAIN_CLASS, str(paths.config.resolve())]
    with paths.log_file.open("ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the caller's terminal must not reach it
        )  # fmt: skip
    paths.pid_file.write_text(f"{process.pid}\n")
    return process


def _wait_joined(
    settings: Settings, cluster: list[Node], launched: dict[int, subprocess.Popen[bytes]]
) -> frozenset[int]:
    """Wait until the cluster lists every node (the ids it lists then); BrokerError if a
    node exits or time runs out."""
    wanted = {node.id for node in cluster}
    deadline = time.monotonic() + settings.kafka.start_timeout.total_seconds()
    registered: frozenset[int] | None = None
    while time.monotonic() < deadline:
        for node_id, process in launched.items():
            if process.poll() is not None:
                paths = BrokerPaths.of(settings, node_id)
                paths.pid_file.unlink(missing_ok=True)
                raise BrokerError(
                    f"node {node_id} exited with code {process.returncode} during start-up; "
                    f"last lines of {paths.log_file}:\n{_log_tail(paths)}"
                )
        registered = _registered(settings.kafka)
        if registered is not None and wanted <= registered:
            return registered
        time.sleep(0.5)
    first = BrokerPaths.of(settings, min(launched))
    joined = "no node answered" if registered is None else (
        f"nodes {', '.join(map(str, sorted(registered)))} joined"
    )  # fmt: skip
    raise BrokerError(
        f"the cluster did not list all {len(cluster)} nodes on {settings.kafka.bootstrap} within "
        f"{settings.kafka.start_timeout} ({joined}); last lines of "
        f"{first.log_file}:\n{_log_tail(first)}"
    )


def _terminate(pid: int, paths: BrokerPaths, grace_seconds: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    _await_exit(pid, paths, grace_seconds)


def _await_exit(pid: int, paths: BrokerPaths, grace_seconds: float) -> None:
    """Wait for a signalled node to exit; SIGKILL it after the grace period."""
    if not _wait_gone(pid, paths, grace_seconds):
        if _is_our_broker(pid, paths):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not _wait_gone(pid, paths, _KILL_WAIT_S):
            raise BrokerError(f"the broker (pid {pid}) did not exit after SIGKILL")
    paths.pid_file.unlink(missing_ok=True)


def stop(settings: Settings, grace_seconds: float = 30.0) -> list[int]:
    """Stop every node :func:`start` started under this state folder (by its pid) and wait;
    return their pids (none if none ran).

    All are signalled at once: a node stopped after the others would wait for a
    quorum that is no longer there.
    """
    running = []
    for node in _node_folders(settings):
        paths = BrokerPaths.of(settings, node)
        pid = _running_pid(paths)
        if pid is None:
            paths.pid_file.unlink(missing_ok=True)
        else:
            running.append((pid, paths))
    for pid, _ in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid, paths in running:
        _await_exit(pid, paths, grace_seconds)
    return [pid for pid, _ in running]


def status(settings: Settings, registered: frozenset[int] | None = None) -> BrokerStatus:
    """Each node's pid, the brokers the cluster lists (``registered``, if known already),
    the active controller and the under-replicated partitions."""
    statuses = []
    for node in nodes(settings.kafka):
        paths = BrokerPaths.of(settings, node.id)
        statuses.append(NodeStatus(node, _running_pid(paths), paths))
    if registered is None:
        registered = _registered(settings.kafka, timeout_ms=5000)
    return BrokerStatus(
        nodes=statuses,
        bootstrap=settings.kafka.bootstrap,
        registered=registered,
        controller=_quorum_leader(statuses),
        under_replicated=[] if registered is None else _under_replicated(settings.kafka),
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1", avoid: frozenset[int] = frozenset()) -> int:
    """The first of ``count`` consecutive TCP ports nothing listens on right now."""
    for _ in range(100):
        first = free_port(host)
        block = range(first, first + count)
        fits = block[-1] <= 65535 and not avoid & set(block)
        if fits and all(_bindable(host, port) for port in block[1:]):
            return first
    raise OSError(f"found no {count} consecutive free ports on {host}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def ephemeral_broker(state_dir: Path, brokers: int = 1, **overrides: Any) -> Iterator[Settings]:
    """A cluster of its own (one broker by default) on free ports under state_dir, stopped
    (by pid) on exit.

    For tests and benchmarks: it never touches the configured cluster or ports.
    With TLS, its clients trust its own certificate, whatever CA file the
    environment names.
    """
    port = free_ports(brokers)
    controller = free_ports(brokers, avoid=frozenset(range(port, port + brokers)))
    settings = Settings.model_validate(
        {
            "state_dir": state_dir,
            "kafka_bootstrap": f"127.0.0.1:{port}",
            "kafka_controller_port": controller,
            "kafka_brokers": brokers,
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
