"""Reaching the Kafka cluster: an admin client that fails fast, a check for commands,
and a consumer whose failed start leaves nothing running.

Both layers and the command line use the check before they start Spark, whose
Kafka source would otherwise retry an unreachable cluster for minutes without
saying why.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from shared.platform.kafka_security import python_client_configs
from shared.settings import KafkaSettings


class KafkaNotReadyError(Exception):
    """The cluster cannot serve a job yet; the message says where it looked and what to do."""


class KafkaUnreachableError(KafkaNotReadyError):
    """The configured cluster did not answer."""


class KafkaTopicsMissingError(KafkaNotReadyError):
    """The cluster answered but lacks topics a job or the API reads or writes."""

    def __init__(self, bootstrap: str, missing: Sequence[str]):
        self.missing = list(missing)
        super().__init__(
            f"topics not found on {bootstrap}: {', '.join(missing)}; create them with "
            "`lambdaline topics create` (names from the topics.* settings)"
        )


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


class BootstrapFailures(logging.Handler):
    """Why kafka-python's attempts to reach the cluster failed.

    A client that cannot bootstrap raises only ``Unable to bootstrap`` after its
    timeout; each attempt's reason (a wrong password, an untrusted certificate, a
    listener that speaks another protocol) is in its log alone. Attached to its
    connection manager's logger, this keeps them.
    """

    LOGGER = "kafka.net.manager"
    _FAILED = re.compile(
        r"^Bootstrap (?:connection|attempt) to \S+ failed: (.*?)(?: \(backoff [\d.]+ secs\))?$"
    )

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if match := self._FAILED.match(record.getMessage()):
            self.reasons.append(match.group(1))

    GENERIC = ("socket disconnected", "reset by peer", "Timeout", "timed out")
    """Reasons that say only that an attempt ended. A client with a wrong password sees
    its broker hang up before it reads the refusal in about half its attempts, and in
    most of them on a busy machine."""

    def most_telling(self) -> str | None:
        """The last reason that says more than that an attempt ended, else the last one."""
        telling = [r for r in self.reasons if not is_generic(r)]
        return (telling or self.reasons)[-1] if self.reasons else None

    @classmethod
    @contextlib.contextmanager
    def watch(cls) -> Iterator[BootstrapFailures]:
        failures = cls()
        logger = logging.getLogger(cls.LOGGER)
        logger.addHandler(failures)
        try:
            yield failures
        finally:
            logger.removeHandler(failures)


class KafkaBootstrapError(KafkaTimeoutError):  # type: ignore[misc]  # no type hints
    """A client could not bootstrap, and an attempt said why (``reason``)."""

    def __init__(self, error: KafkaTimeoutError, reason: str):
        self.reason = reason
        super().__init__(
            f"{error.args[0] if error.args else error}; the last attempt failed: {reason}"
        )


@contextlib.contextmanager
def bootstrap_reasons() -> Iterator[None]:
    """Turn a client's ``Unable to bootstrap`` into a KafkaBootstrapError that says why."""
    with BootstrapFailures.watch() as failures:
        try:
            yield
        except KafkaTimeoutError as error:
            if (reason := failures.most_telling()) is None:
                raise
            raise KafkaBootstrapError(error, reason) from error


def admin_client(
    kafka: KafkaSettings, client_id: str = "lambdaline", timeout_ms: int | None = None
) -> KafkaAdminClient:
    """An admin client for the configured cluster, failing fast if no bootstrap server listens.

    kafka-python waits ``timeout_ms`` (default: ``kafka_timeout``) to bootstrap and
    then leaves its network thread running until its own timeouts pass; a refused
    connection is known at once, so it is checked first.
    """
    if not any(port_open(host, port) for host, port in kafka.bootstrap_servers):
        raise KafkaConnectionError(f"nothing listens on {kafka.bootstrap}")
    if timeout_ms is None:
        timeout_ms = int(kafka.timeout.total_seconds() * 1000)
    with bootstrap_reasons():
        return KafkaAdminClient(
            bootstrap_servers=kafka.bootstrap,
            client_id=client_id,
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
            **python_client_configs(kafka),
        )


def unreachable(kafka: KafkaSettings, error: Exception) -> KafkaUnreachableError:
    """The error a command reports when the configured cluster does not answer.

    A failed attempt's own reason (:class:`KafkaBootstrapError`) decides what the
    message tells the user to do.
    """
    if isinstance(error, KafkaBootstrapError):
        remedy = _remedy(kafka, error.reason)
    else:
        remedy = (
            "start the embedded broker with `lambdaline kafka start` or set "
            "LAMBDALINE_KAFKA_BOOTSTRAP"
        )
    where = kafka.bootstrap
    return KafkaUnreachableError(f"cannot reach Kafka at {where} ({error}); {remedy}")


def is_generic(reason: str) -> bool:
    """True if a failed attempt's reason says only that it ended (see BootstrapFailures)."""
    return any(word in reason for word in BootstrapFailures.GENERIC)


def _remedy(kafka: KafkaSettings, reason: str) -> str:
    protocol = f"kafka_security_protocol is {kafka.security_protocol}"
    credentials = "check LAMBDALINE_KAFKA_SASL_USERNAME and LAMBDALINE_KAFKA_SASL_PASSWORD"
    if "SaslAuthenticationFailed" in reason:
        return credentials
    if is_generic(reason) and kafka.uses_sasl:
        # the refusal itself often does not reach kafka-python before the hang-up
        return (
            f"the broker hung up or did not answer, as it does when it refuses a login: "
            f"{credentials}, and that its listener speaks {kafka.security_protocol}"
        )
    if "UnsupportedSaslMechanism" in reason:
        return (
            f"the cluster does not offer kafka_sasl_mechanism {kafka.sasl_mechanism}; "
            "set LAMBDALINE_KAFKA_SASL_MECHANISM to one it does"
        )
    # the TLS alerts of a broker that wants a client certificate and got none, or one it
    # does not trust (Java's broker sends "bad certificate" for both)
    if re.search(
        r"CERTIFICATE_REQUIRED|ALERT_(?:BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|UNKNOWN_CA)", reason
    ):
        if kafka.ssl_certfile is None:
            return (
                "the cluster asks for a client certificate: set LAMBDALINE_KAFKA_SSL_CERTFILE "
                "and LAMBDALINE_KAFKA_SSL_KEYFILE (none is set)"
            )
        return (
            "the cluster does not accept the client certificate in "
            f"{kafka.ssl_certfile}: check that its CA signed it"
        )
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        cafile = kafka.ssl_cafile
        now = f"{cafile} does not hold it" if cafile else "none is set: the system's are used"
        return (
            "the broker's certificate is not signed by a CA the client trusts; set "
            f"LAMBDALINE_KAFKA_SSL_CAFILE to the CA's PEM file ({now})"
        )
    return (
        f"{protocol}: check that the cluster's listener at {kafka.bootstrap} speaks "
        "it (and LAMBDALINE_KAFKA_SASL_MECHANISM, with SASL)"
    )


@dataclass(frozen=True)
class TopicFacts:
    """What the cluster says of one topic."""

    topic_id: uuid.UUID | None
    """Kafka's id of the topic (KIP-516): a topic deleted and created again gets a new one."""
    partitions: int


class Bounds(NamedTuple):
    """A partition's offsets: the earliest Kafka still keeps, and the next to be written."""

    earliest: int
    end: int


def describe_present(admin: KafkaAdminClient, topics: Collection[str]) -> dict[str, TopicFacts]:
    """Each of ``topics`` that exists on the cluster, described; a missing one is left out."""
    if not topics:
        return {}
    present = set(admin.list_topics()) & set(topics)  # describing a missing topic is an error
    described = admin.describe_topics(sorted(present)) if present else []
    return {
        topic["name"]: TopicFacts(_topic_id(topic.get("topic_id")), len(topic["partitions"]))
        for topic in described
    }


def _topic_id(text: str | None) -> uuid.UUID | None:
    unset = uuid.UUID(int=0)  # a broker before 2.8 has no ids
    return None if not text or uuid.UUID(str(text)) == unset else uuid.UUID(str(text))


def partition_counts(admin: KafkaAdminClient, topics: Collection[str]) -> dict[str, int]:
    """How many partitions each of ``topics`` has on the cluster; a missing topic is left out."""
    return {name: facts.partitions for name, facts in describe_present(admin, topics).items()}


def offset_bounds(kafka: KafkaSettings, topics: Collection[str]) -> dict[tuple[str, int], Bounds]:
    """Each partition of ``topics`` (all present): its earliest offset kept and its end offset.

    Raises KafkaUnreachableError if the cluster does not answer.
    """
    try:
        consumer = kafka_consumer(kafka, "lambdaline-check", group_id=None)
        try:
            partitions = [
                TopicPartition(topic, number)
                for topic in topics
                for number in sorted(consumer.partitions_for_topic(topic) or ())
            ]
            timeout_ms = int(kafka.timeout.total_seconds() * 1000)
            earliest = consumer.beginning_offsets(partitions, timeout_ms=timeout_ms)
            ends = consumer.end_offsets(partitions, timeout_ms=timeout_ms)
        finally:
            consumer.close()
    except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as error:
        raise unreachable(kafka, error) from None
    return {
        (partition.topic, partition.partition): Bounds(earliest[partition], ends[partition])
        for partition in partitions
    }


def records_written(kafka: KafkaSettings, topics: Collection[str]) -> dict[str, int]:
    """How many records each of ``topics`` (all present) was ever given: its partitions'
    end offsets, summed. Neither retention nor compaction lowers an end offset; only
    deleting the topic does."""
    written = dict.fromkeys(topics, 0)
    for (topic, _), bounds in offset_bounds(kafka, topics).items():
        written[topic] += bounds.end
    return written


def require_kafka(
    kafka: KafkaSettings, topics: Collection[str] = (), min_partitions: int = 1
) -> None:
    """Return if the cluster answers and holds ``topics``, each with at least
    ``min_partitions`` partitions; raise a KafkaNotReadyError if not.

    Without the check, Spark's Kafka source retries a missing topic and then
    fails with a Java stack trace of hundreds of lines, its sink (and
    kafka-python's producer) waits a minute for a topic's metadata first, and a
    producer that picks partitions fails on one the topic does not have.
    """
    try:
        admin = admin_client(kafka, client_id="lambdaline-check")
        try:
            admin.describe_cluster()
            counts = partition_counts(admin, topics)
        finally:
            admin.close()
    except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as error:
        raise unreachable(kafka, error) from None
    if missing := sorted(set(topics) - set(counts)):
        raise KafkaTopicsMissingError(kafka.bootstrap, missing)
    if short := sorted(f"{topic} ({n})" for topic, n in counts.items() if n < min_partitions):
        raise KafkaNotReadyError(
            f"topics with fewer than the {min_partitions} partitions the kafka_partitions "
            f"setting asks for, on {kafka.bootstrap}: {', '.join(short)}; set "
            "LAMBDALINE_KAFKA_PARTITIONS to their count, or add partitions to them"
        )


def kafka_answers(kafka: KafkaSettings) -> str:
    """ "" if the cluster answers now; else "; " and why not, to follow a job's error.

    A streaming query whose broker went away fails after its consumer's timeout
    with a Kafka TimeoutException; this says whether that is the reason.
    """
    try:
        require_kafka(kafka)
    except KafkaNotReadyError as error:
        return f"; {error}"
    return ""


class _Consumer(KafkaConsumer):  # type: ignore[misc]  # kafka-python has no type hints
    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            # the half-built client's network thread, started before the bootstrap
            client = getattr(self, "_client", None)
            if client is not None:
                client.close()
            raise


def kafka_consumer(kafka: KafkaSettings, client_id: str, **configs: Any) -> KafkaConsumer:
    """A ``KafkaConsumer`` of the configured cluster that leaves no thread behind if it fails.

    kafka-python 3 starts a network thread before it bootstraps, and a bootstrap
    that times out (``bootstrap_timeout_ms``) raises out of the constructor with
    that thread still running: a caller that retries an unreachable cluster
    gained a thread per attempt. Here a failed construction closes it.

    A consumer without a ``group_id`` has nowhere to commit: auto-commit is off
    (kafka-python would turn it off too, with a warning in every such reader's log).
    """
    if configs.get("group_id") is None:
        configs.setdefault("enable_auto_commit", False)
    with bootstrap_reasons():
        return _Consumer(
            bootstrap_servers=kafka.bootstrap,
            client_id=client_id,
            **python_client_configs(kafka),
            **configs,
        )


def records_to_end(
    consumer: KafkaConsumer, partitions: Sequence[TopicPartition], timeout_s: float
) -> Iterator[list[ConsumerRecord]]:
    """Each poll's records of one partition, from the beginning of ``partitions`` to the
    end offsets they had when asked: what was there then, however busy the topics
    are meanwhile. Raises TimeoutError if the ends are not reached within ``timeout_s``.
    """
    if not partitions:
        return
    consumer.assign(list(partitions))
    consumer.seek_to_beginning(*partitions)
    ends = consumer.end_offsets(list(partitions))
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(partition) < end for partition, end in ends.items()):
        if time.monotonic() > deadline:
            topics = ", ".join(sorted({partition.topic for partition in partitions}))
            raise TimeoutError(f"{topics} not read to their ends in {timeout_s:g} s")
        for partition, records in consumer.poll(timeout_ms=500, max_records=10_000).items():
            end = ends[partition]
            yield records if records[-1].offset < end else [r for r in records if r.offset < end]


def kafka_producer(kafka: KafkaSettings, client_id: str, **configs: Any) -> KafkaProducer:
    """A ``KafkaProducer`` of the configured cluster, with its security settings.

    A send is acknowledged once every in-sync replica has the record (``acks=all``),
    and retries do not write it twice (idempotence): with replication factor 3 and
    ``min.insync.replicas`` 2, an acknowledged record survives the loss of a broker.
    """
    return KafkaProducer(
        bootstrap_servers=kafka.bootstrap,
        client_id=client_id,
        **python_client_configs(kafka),
        **({"acks": "all", "enable_idempotence": True} | configs),
    )
