"""Both layers' Kafka clients on a cluster that asks for TLS, a SASL password and
a client certificate.

The brokers are the embedded ones, listening with SASL_SSL (PLAIN) and a
certificate of its own, asking for client certificates (on SASL_SSL only the
listener-prefixed ``ssl.client.auth`` does that); it trusts the client
certificate of the settings. Its password holds a quote, a backslash and a
letter outside ASCII: each would be read back changed by one layer of quoting
(the JAAS line, Java's properties file, its ISO-8859-1 reading). The client's
key is encrypted by PBES2, which Java 17 cannot decrypt itself. One cluster of
three brokers carries all three, so that the suite starts one secured cluster
(whose brokers replicate over that same listener) and runs the speed job on it once.
"""

from __future__ import annotations

import logging
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lambdaline import kafka_broker
from lambdaline.generator import GeneratorConfig, send_to_kafka
from shared.platform.kafka_admin import KafkaUnreachableError, require_kafka
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from speed_layer import job
from speed_layer.checkpoint import claimed_checkpoint
from tests.certificates import client_certificate
from tests.integration.conftest import broker_settings
from tests.integration.helpers import environment_of, isolated_settings, speed_view

pytestmark = pytest.mark.integration

PASSWORD = 'p"a\\ss wörd'
KEY_PASSWORD = "key pässword"


def secured_settings(state_dir: Path, **overrides: object) -> Settings:
    plain = broker_settings(state_dir)
    fields: dict[str, object] = {
        "state_dir": state_dir,
        "kafka_bootstrap": plain.kafka.bootstrap,
        "kafka_controller_port": plain.kafka.controller_port,
        "kafka_heap": "512m",
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_username": "lambdaline-tests",
        "kafka_sasl_password": PASSWORD,
    }
    return Settings(**(fields | overrides))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A running SASL_SSL cluster of three brokers that asks for client certificates,
    with lambdaline's topics; its clients trust its certificate and present theirs,
    and so do the brokers among themselves (replication runs on the same listener)."""
    folder = tmp_path_factory.mktemp("kafka-secured")
    client = client_certificate(folder / "client", password=KEY_PASSWORD)
    with kafka_broker.ephemeral_broker(
        folder / "state", brokers=3, kafka_heap="512m",
        kafka_security_protocol="SASL_SSL", kafka_sasl_username="lambdaline-tests",
        kafka_sasl_password=PASSWORD, kafka_ssl_certfile=client.certfile,
        kafka_ssl_keyfile=client.keyfile, kafka_ssl_key_password=KEY_PASSWORD,
    ) as settings:  # fmt: skip
        create_topics(settings)
        yield settings


def test_a_tls_broker_is_refused_until_clients_trust_its_certificate(tmp_path: Path) -> None:
    settings = secured_settings(tmp_path, kafka_security_protocol="SSL", **_no_sasl())
    pem = tmp_path / "kafka" / "tls" / "broker.pem"

    with pytest.raises(kafka_broker.BrokerError) as refused:
        kafka_broker.start(settings)

    assert str(refused.value) == (
        "the embedded broker presents a certificate of its own, which clients trust only "
        f"through kafka_ssl_cafile: set LAMBDALINE_KAFKA_SSL_CAFILE={pem.resolve()}"
    )
    assert not (tmp_path / "kafka" / "node-1" / "broker.pid").exists()  # nothing was started
    ssl.create_default_context(cafile=pem)  # a certificate Python's TLS loads
    elsewhere = tmp_path / "other.pem"
    elsewhere.write_text(_other_certificate(tmp_path))
    with pytest.raises(kafka_broker.BrokerError, match=f"now {elsewhere}, which does not hold it"):
        kafka_broker.start(settings.updated(kafka_ssl_cafile=elsewhere))


def test_the_speed_layer_runs_with_a_password_and_a_client_certificate(
    secured: Settings, spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = isolated_settings(secured, tmp_path)
    wave = GeneratorConfig(
        events=100, seed=5, plates=40, late=0.0, duplicate=0.0, malformed=0.0,
        start=datetime(2026, 1, 6, 6, tzinfo=UTC),
    )  # fmt: skip
    # two producer processes, each given the settings (and so the passwords) by pickle
    assert send_to_kafka(wave, settings, workers=2).by_kind["entry"] == 100

    # the checks `speed run` makes before Spark starts, on kafka-python's secured clients;
    # then Spark's source and sink log in with the JAAS line and present the certificate
    # from their PEM key store, its key decrypted on the driver
    caplog.set_level(logging.INFO, logger="lambdaline")
    with claimed_checkpoint(settings):
        job.run(spark, settings, available_now=True)
    counted = speed_view(settings, "booth_stats").values()
    assert sum(int(row["vehicle_count"]) for row in counted) == 100
    # what `speed run` shows (shared.platform.logs.configure_logging): lambdaline's lines,
    # and the warnings of the libraries it calls
    shown = [
        record.getMessage() for record in caplog.records
        if record.name.startswith("lambdaline") or record.levelno >= logging.WARNING
    ]  # fmt: skip
    assert any('"event": "speed_input_topic_ids"' in line for line in shown)
    assert not [line for line in shown if "wörd" in line or "pässword" in line]


def test_the_files_holding_passwords_are_their_owners_alone(secured: Settings) -> None:
    paths = kafka_broker.BrokerPaths.of(secured)
    for holder in (paths.config, paths.keystore_password):
        assert holder.stat().st_mode & 0o777 == 0o600, holder


def test_a_wrong_password_is_named(secured: Settings) -> None:
    # about half of kafka-python's attempts see the broker hang up before its refusal
    # arrives (most, on a busy machine); in 15 s it makes about nine
    environment = environment_of(secured) | {
        "LAMBDALINE_KAFKA_SASL_PASSWORD": "not the password",
        "LAMBDALINE_KAFKA_TIMEOUT": "15s",
    }

    created = subprocess.run(
        [sys.executable, "-m", "lambdaline.cli", "topics", "create"],
        env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert created.returncode == 1, created.stderr
    assert created.stderr.startswith(f"error: cannot reach Kafka at {secured.kafka.bootstrap} ("), (
        created.stderr
    )
    # the refusal itself, or (on a busy machine, in most attempts) the broker's hang-up,
    # or an attempt that timed out (CI once saw "Timeout during ApiVersions check")
    assert re.search(
        r"; the last attempt failed: (?:\[Error 58\] SaslAuthenticationFailedError: .*Invalid "
        r"username or password\); check |.*(?:socket disconnected|reset by peer|Timeout|timed out)"
        r".*\); the broker hung up or did not answer, as it does when it refuses a login: check )"
        r"LAMBDALINE_KAFKA_SASL_USERNAME and LAMBDALINE_KAFKA_SASL_PASSWORD",
        created.stderr,
    ), created.stderr


def test_an_untrusted_certificate_and_another_protocol_are_named(secured: Settings) -> None:
    untrusting = secured.updated(
        **{"kafka_ssl_cafile": None, "kafka_timeout": timedelta(seconds=3)}
    )
    with pytest.raises(KafkaUnreachableError) as untrusted:
        require_kafka(untrusting.kafka)
    assert "CERTIFICATE_VERIFY_FAILED" in str(untrusted.value)
    assert str(untrusted.value).endswith(
        "the broker's certificate is not signed by a CA the client trusts; set "
        "LAMBDALINE_KAFKA_SSL_CAFILE to the CA's PEM file (none is set: the system's are used)"
    )

    # a client speaking PLAINTEXT (so with no credentials and no certificate of its own)
    plaintext = untrusting.updated(
        **{"kafka_security_protocol": "PLAINTEXT", **_no_sasl(), **_no_client_certificate()}
    )
    with pytest.raises(KafkaUnreachableError) as other:
        require_kafka(plaintext.kafka)
    assert str(other.value).endswith(
        f"kafka_security_protocol is PLAINTEXT: check that the cluster's listener at "
        f"{secured.kafka.bootstrap} speaks it (and LAMBDALINE_KAFKA_SASL_MECHANISM, with SASL)"
    )


def test_a_missing_or_untrusted_client_certificate_is_named(
    secured: Settings, tmp_path: Path
) -> None:
    without = secured.updated(**{
            "kafka_ssl_certfile": None, "kafka_ssl_keyfile": None,
            "kafka_ssl_key_password": None, "kafka_timeout": timedelta(seconds=3),
        }
    )  # fmt: skip
    with pytest.raises(KafkaUnreachableError) as missing:
        require_kafka(without.kafka)
    assert str(missing.value).endswith(
        "the cluster asks for a client certificate: set LAMBDALINE_KAFKA_SSL_CERTFILE and "
        "LAMBDALINE_KAFKA_SSL_KEYFILE (none is set)"
    ), missing.value

    stranger = client_certificate(tmp_path, name="stranger")
    untrusted = without.updated(
        **{"kafka_ssl_certfile": stranger.certfile, "kafka_ssl_keyfile": stranger.keyfile}
    )
    with pytest.raises(KafkaUnreachableError) as refused:
        require_kafka(untrusted.kafka)
    assert str(refused.value).endswith(
        f"the cluster does not accept the client certificate in {stranger.certfile}: check "
        "that its CA signed it"
    ), refused.value


def _no_sasl() -> dict[str, object]:
    return {"kafka_sasl_username": None, "kafka_sasl_password": None}


def _no_client_certificate() -> dict[str, object]:
    return {"kafka_ssl_certfile": None, "kafka_ssl_keyfile": None, "kafka_ssl_key_password": None}


def _other_certificate(folder: Path) -> str:
    """A PEM certificate the broker does not present: another state folder's broker's."""
    other = secured_settings(folder / "other", kafka_security_protocol="SSL", **_no_sasl())
    return kafka_broker.certificate(other).read_text()
