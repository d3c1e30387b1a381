"""Both layers' Kafka clients on a cluster that asks every client for a certificate.

The broker is the embedded one, listening with SSL and ``ssl.client.auth=required``;
it trusts the client certificate of the settings, whose key is encrypted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from lambdaline import kafka_broker
from lambdaline.topics import create_topics
from shared.kafka_admin import KafkaUnreachableError, require_kafka
from shared.settings import Settings
from tests.certificates import client_certificate
from tests.integration.helpers import isolated_settings, speed_job_counts_100_entries

pytestmark = pytest.mark.integration

KEY_PASSWORD = "key pässword"


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A running broker that asks for client certificates, with lambdaline's topics."""
    folder = tmp_path_factory.mktemp("kafka-mtls")
    client = client_certificate(folder / "client", password=KEY_PASSWORD)
    with kafka_broker.ephemeral_broker(
        folder / "state", kafka_heap="512m", kafka_security_protocol="SSL",
        kafka_ssl_certfile=client.certfile, kafka_ssl_keyfile=client.keyfile,
        kafka_ssl_key_password=KEY_PASSWORD,
    ) as settings:  # fmt: skip
        create_topics(settings)
        yield settings


def test_the_speed_layer_runs_with_a_client_certificate(mutual: Settings, tmp_path: Path) -> None:
    # Spark's source and sink present the certificate from their PEM key store, the
    # key decrypted on the driver (Java 17 cannot decrypt this PBES2 key itself)
    output = speed_job_counts_100_entries(isolated_settings(mutual, tmp_path))
    assert "pässword" not in output


def test_a_missing_or_untrusted_client_certificate_is_named(
    mutual: Settings, tmp_path: Path
) -> None:
    quick = timedelta(seconds=3)
    without = mutual.model_copy(
        update={
            "kafka_ssl_certfile": None, "kafka_ssl_keyfile": None,
            "kafka_ssl_key_password": None, "kafka_timeout": quick,
        }
    )  # fmt: skip
    with pytest.raises(KafkaUnreachableError) as missing:
        require_kafka(without)
    assert str(missing.value).endswith(
        "the cluster asks for a client certificate: set LAMBDALINE_KAFKA_SSL_CERTFILE and "
        "LAMBDALINE_KAFKA_SSL_KEYFILE (none is set)"
    ), missing.value

    stranger = client_certificate(tmp_path, name="stranger")
    untrusted = without.model_copy(
        update={"kafka_ssl_certfile": stranger.certfile, "kafka_ssl_keyfile": stranger.keyfile}
    )
    with pytest.raises(KafkaUnreachableError) as refused:
        require_kafka(untrusted)
    assert str(refused.value).endswith(
        f"the cluster does not accept the client certificate in {stranger.certfile}: check "
        "that its CA signed it"
    ), refused.value
