"""Reaching the Kafka cluster: an admin client that fails fast, and a check for commands.

Both layers and the command line use these before they start Spark, whose
Kafka source would otherwise retry an unreachable cluster for minutes without
saying why.
"""

from __future__ import annotations

import socket

from kafka import KafkaAdminClient
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from shared.settings import Settings


class KafkaUnreachableError(Exception):
    """The configured cluster did not answer; the message says where it looked and what to do."""


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def admin_client(settings: Settings, client_id: str = "lambdaline") -> KafkaAdminClient:
    """An admin client for the configured cluster, failing fast if no bootstrap server listens.

    kafka-python waits ``kafka_timeout`` to bootstrap and then leaves its network
    thread running until its own timeouts pass; a refused connection is known at
    once, so it is checked first.
    """
    if not any(port_open(host, port) for host, port in settings.bootstrap_servers):
        raise KafkaConnectionError(f"nothing listens on {settings.kafka_bootstrap}")
    timeout_ms = int(settings.kafka_timeout.total_seconds() * 1000)
    return KafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap,
        client_id=client_id,
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=timeout_ms,
    )


def require_kafka(settings: Settings) -> None:
    """Return if the cluster answers a cluster description; raise KafkaUnreachableError if not."""
    try:
        admin = admin_client(settings, client_id="lambdaline-check")
        try:
            admin.describe_cluster()
        finally:
            admin.close()
    except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as error:
        raise KafkaUnreachableError(
            f"cannot reach Kafka at {settings.kafka_bootstrap} ({error}); start the embedded "
            "broker with `lambdaline kafka start` or set LAMBDALINE_KAFKA_BOOTSTRAP"
        ) from None
