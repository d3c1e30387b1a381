"""The security settings, and the configuration each kind of Kafka client gets from them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kafka.errors import KafkaTimeoutError

from lambdaline import kafka_broker
from shared.platform.kafka_admin import BootstrapFailures, KafkaBootstrapError, unreachable
from shared.platform.kafka_security import (
    jaas_quote,
    python_client_configs,
    security_environment,
    spark_kafka_options,
)
from shared.settings import Settings, SettingsError, get_settings, read_settings
from tests.certificates import client_certificate

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture
def cafile(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text(PEM)
    return path


def sasl_ssl(cafile: Path, **overrides: object) -> Settings:
    fields: dict[str, object] = {
        "kafka_bootstrap": "broker-1:9093,broker-2:9093",
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "alice",
        "kafka_sasl_password": 'p"a\\ss',
        "kafka_ssl_cafile": cafile,
    }
    return Settings(**(fields | overrides))  # type: ignore[arg-type]


def test_plaintext_is_the_default_and_adds_nothing_but_the_protocol() -> None:
    settings = Settings()
    assert python_client_configs(settings.kafka) == {"security_protocol": "PLAINTEXT"}
    assert spark_kafka_options(settings.kafka) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_kafka_python_clients_get_the_credentials_and_the_ca_file(cafile: Path) -> None:
    assert python_client_configs(sasl_ssl(cafile).kafka) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 'p"a\\ss',
        "ssl_cafile": str(cafile),
    }


def test_a_child_given_the_security_environment_reaches_the_cluster_the_same_way(
    cafile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secured = sasl_ssl(cafile)
    assert security_environment(secured.kafka) == {
        "LAMBDALINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "LAMBDALINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "LAMBDALINE_KAFKA_SASL_USERNAME": "alice",
        "LAMBDALINE_KAFKA_SASL_PASSWORD": 'p"a\\ss',
        "LAMBDALINE_KAFKA_SSL_CAFILE": str(cafile),
        "LAMBDALINE_KAFKA_SSL_CERTFILE": "",
        "LAMBDALINE_KAFKA_SSL_KEYFILE": "",
        "LAMBDALINE_KAFKA_SSL_KEY_PASSWORD": "",
    }
    # a parent's own cluster settings (a variable, the settings file) do not reach the child
    plaintext = security_environment(Settings().kafka)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lambdaline.toml").write_text('kafka_sasl_username = "bob"\n')
    monkeypatch.setenv("LAMBDALINE_KAFKA_SSL_CAFILE", str(cafile))
    for name, value in plaintext.items():
        monkeypatch.setenv(name, value)
    child = read_settings()
    assert child.kafka.security_protocol == "PLAINTEXT"
    assert (child.kafka.sasl_username, child.kafka.ssl_cafile) == (None, None)


def test_spark_gets_a_jaas_line_and_the_certificates_themselves(cafile: Path) -> None:
    # the executors read no file of the driver's: the PEM text travels in the options
    assert spark_kafka_options(sasl_ssl(cafile).kafka) == {
        "kafka.bootstrap.servers": "broker-1:9093,broker-2:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="alice" password="p\\"a\\\\ss";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": PEM,
    }


def test_without_a_ca_file_tls_clients_use_the_systems_trust_store() -> None:
    settings = Settings(kafka_security_protocol="SSL")
    assert python_client_configs(settings.kafka) == {"security_protocol": "SSL"}
    assert "kafka.ssl.truststore.certificates" not in spark_kafka_options(settings.kafka)


@pytest.mark.parametrize(
    ("value", "quoted"),
    [("plain", '"plain"'), ('a"b', '"a\\"b"'), ("a\\b", '"a\\\\b"'), ('\\"', '"\\\\\\""')],
)
def test_a_jaas_value_escapes_quotes_and_backslashes(value: str, quoted: str) -> None:
    assert jaas_quote(value) == quoted


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"LAMBDALINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "invalid settings: kafka_security_protocol SASL_SSL needs kafka_sasl_username and "
            "kafka_sasl_password (LAMBDALINE_KAFKA_SASL_USERNAME, LAMBDALINE_KAFKA_SASL_PASSWORD)",
        ),
        (
            {"LAMBDALINE_KAFKA_SASL_USERNAME": "alice", "LAMBDALINE_KAFKA_SASL_PASSWORD": "pw"},
            "invalid settings: kafka_sasl_username or kafka_sasl_password is set but "
            "kafka_security_protocol is PLAINTEXT, which sends no credentials; set it to "
            "SASL_SSL (or SASL_PLAINTEXT)",
        ),
        (
            {"LAMBDALINE_KAFKA_SECURITY_PROTOCOL": "TLS"},
            "invalid setting kafka_security_protocol (LAMBDALINE_KAFKA_SECURITY_PROTOCOL): Input "
            "should be 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'",
        ),
        (
            {"LAMBDALINE_KAFKA_SSL_CAFILE": "/no/such.pem"},
            "invalid setting kafka_ssl_cafile (LAMBDALINE_KAFKA_SSL_CAFILE): Value error, cannot "
            "read /no/such.pem: No such file or directory",
        ),
    ],
)
def test_security_settings_that_disagree_are_named(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as refused:
        get_settings()
    assert str(refused.value) == message


def test_a_ca_file_needs_tls_and_a_certificate_in_it(tmp_path: Path, cafile: Path) -> None:
    with pytest.raises(ValueError, match="kafka_ssl_cafile is set but kafka_security_protocol is"):
        Settings(kafka_ssl_cafile=cafile)
    not_pem = tmp_path / "key.txt"
    not_pem.write_text("secret\n")
    with pytest.raises(ValueError, match=r"key\.txt holds no PEM certificate"):
        Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=not_pem)


def test_a_client_certificate_reaches_both_kinds_of_client(tmp_path: Path, cafile: Path) -> None:
    client = client_certificate(tmp_path, password="key pw")  # PBES2, as OpenSSL encrypts
    settings = Settings(
        kafka_security_protocol="SSL", kafka_ssl_cafile=cafile,
        kafka_ssl_certfile=client.certfile, kafka_ssl_keyfile=client.keyfile,
        kafka_ssl_key_password="key pw",
    )  # fmt: skip
    assert python_client_configs(settings.kafka) == {
        "security_protocol": "SSL",
        "ssl_cafile": str(cafile),
        "ssl_certfile": str(client.certfile),
        "ssl_keyfile": str(client.keyfile),
        "ssl_password": "key pw",
    }
    assert "key pw" not in repr(settings)
    # Spark's executors get the certificate and the key themselves, the key as Java 17
    # reads it: PKCS#8, decrypted
    options = spark_kafka_options(settings.kafka)
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.certificate.chain"] == client.certfile.read_text()
    key_text = options["kafka.ssl.keystore.key"]
    assert key_text.startswith("-----BEGIN PRIVATE KEY-----\n")
    assert "kafka.ssl.key.password" not in options
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    certificate = x509.load_pem_x509_certificate(client.certfile.read_bytes())
    key = serialization.load_pem_private_key(key_text.encode(), password=None)
    assert key.public_key().public_bytes(*spki) == certificate.public_key().public_bytes(*spki)


def test_a_pkcs1_key_reaches_spark_as_pkcs8(tmp_path: Path) -> None:
    client = client_certificate(tmp_path, key_format="PKCS1")
    assert client.keyfile.read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")
    settings = Settings(
        kafka_security_protocol="SSL",
        kafka_ssl_certfile=client.certfile,
        kafka_ssl_keyfile=client.keyfile,
    )
    key_text = spark_kafka_options(settings.kafka)["kafka.ssl.keystore.key"]
    assert key_text.startswith("-----BEGIN PRIVATE KEY-----\n")


def test_a_client_certificate_its_key_and_the_keys_password_must_agree(tmp_path: Path) -> None:
    plain = client_certificate(tmp_path / "plain")
    locked = client_certificate(tmp_path / "locked", password="right")
    other = client_certificate(tmp_path / "other")

    def refused(**fields: object) -> str:
        with pytest.raises(ValueError) as error:
            Settings(kafka_security_protocol="SSL", **fields)  # type: ignore[arg-type]
        return str(error.value)

    assert "a client certificate needs both kafka_ssl_certfile and kafka_ssl_keyfile" in refused(
        kafka_ssl_certfile=plain.certfile
    )
    assert f"{plain.certfile} holds no PEM private key" in refused(
        kafka_ssl_certfile=plain.certfile, kafka_ssl_keyfile=plain.certfile
    )
    assert f"{locked.keyfile} is encrypted: set kafka_ssl_key_password" in refused(
        kafka_ssl_certfile=locked.certfile, kafka_ssl_keyfile=locked.keyfile
    )
    assert f"kafka_ssl_key_password is set but {plain.keyfile} is not encrypted" in refused(
        kafka_ssl_certfile=plain.certfile, kafka_ssl_keyfile=plain.keyfile,
        kafka_ssl_key_password="pw",
    )  # fmt: skip
    assert f"cannot decrypt {locked.keyfile} with kafka_ssl_key_password" in refused(
        kafka_ssl_certfile=locked.certfile, kafka_ssl_keyfile=locked.keyfile,
        kafka_ssl_key_password="wrong",
    )  # fmt: skip
    assert f"{other.keyfile} is not the key of the certificate in {plain.certfile}" in refused(
        kafka_ssl_certfile=plain.certfile, kafka_ssl_keyfile=other.keyfile
    )
    assert "kafka_ssl_key_password is set but kafka_ssl_keyfile is not" in refused(
        kafka_ssl_key_password="pw"
    )
    with pytest.raises(ValueError, match="kafka_ssl_certfile is set but kafka_security_protocol"):
        Settings(kafka_ssl_certfile=plain.certfile, kafka_ssl_keyfile=plain.keyfile)
    assert Settings(
        kafka_security_protocol="SASL_SSL", kafka_sasl_username="u", kafka_sasl_password="p",
        kafka_ssl_certfile=locked.certfile, kafka_ssl_keyfile=locked.keyfile,
        kafka_ssl_key_password="right",
    ).kafka.ssl_keyfile == locked.keyfile  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "kafka_sasl_username", "kafka_sasl_password", "kafka_ssl_cafile",
        "kafka_ssl_certfile", "kafka_ssl_keyfile", "kafka_ssl_key_password",
    ],
)  # fmt: skip
def test_an_empty_variable_unsets_a_security_setting_of_the_settings_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    # the file's value alone would be refused (it needs a protocol, or its partner setting)
    settings_file = tmp_path / "lambdaline.toml"
    settings_file.write_text(f'{name} = "{tmp_path / "no-such-file"}"\n')
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(settings_file))
    monkeypatch.setenv(f"LAMBDALINE_{name.upper()}", "")
    assert get_settings().flat()[name] is None


def test_the_password_is_hidden_wherever_settings_are_shown(cafile: Path) -> None:
    settings = sasl_ssl(cafile)
    assert 'p"a' not in repr(settings)
    assert settings.model_dump(mode="json")["kafka"]["sasl_password"] == "**********"


def test_the_embedded_brokers_listener_takes_the_client_settings(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=tmp_path, kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_username="alice", kafka_sasl_password='p"a\\ss wörd\n',
    )  # fmt: skip
    paths = kafka_broker.BrokerPaths.of(settings)
    lines = kafka_broker.server_properties(settings, paths).splitlines()
    assert "listeners=SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9192" in lines
    assert "inter.broker.listener.name=SASL_PLAINTEXT" in lines
    assert (
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT" in lines
    )
    assert "sasl.enabled.mechanisms=PLAIN" in lines
    # Java's Properties reads \\ as \, \uXXXX as that character, and the file as ISO-8859-1;
    # the JAAS parser then reads \" as " and \\ as \
    assert (
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="p\\\\"a\\\\\\\\ss w\\u00f6rd\\u000a" '
        'user_alice="p\\\\"a\\\\\\\\ss w\\u00f6rd\\u000a";'
    ) in lines


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        ({"kafka_sasl_mechanism": "SCRAM-SHA-256"}, "offers SASL by PLAIN only, not SCRAM-SHA-256"),
        ({"kafka_sasl_username": "al ice"}, "not 'al ice'"),
    ],
)
def test_the_embedded_broker_refuses_what_it_cannot_serve(
    overrides: dict[str, str], refusal: str
) -> None:
    fields = {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_username": "alice"}
    settings = Settings(**(fields | {"kafka_sasl_password": "pw"} | overrides))  # type: ignore[arg-type]
    with pytest.raises(kafka_broker.BrokerError, match=refusal):
        kafka_broker.check_security_settings(settings.kafka)


def _failed(reason: str) -> logging.LogRecord:
    message = "Bootstrap connection to %s failed: %s (backoff %.2f secs)"
    return logging.LogRecord(
        "kafka.net.manager", logging.WARNING, __file__, 1, message, ("bootstrap-0", reason, 0.4),
        None,
    )  # fmt: skip


def test_the_most_telling_failed_attempt_is_kept_over_a_hang_up() -> None:
    auth = "[Error 58] SaslAuthenticationFailedError: Authentication failed: Invalid username"
    failures = BootstrapFailures()
    assert failures.most_telling() is None
    for reason in [
        "KafkaConnectionError: socket disconnected",
        auth,
        "KafkaConnectionError: socket disconnected",
        "KafkaTimeoutError: Timeout during ApiVersions check",
    ]:
        failures.handle(_failed(reason))
    assert failures.most_telling() == auth

    # a connection made whose metadata request then failed is logged in other words
    after_connecting = BootstrapFailures()
    reason = "[Error 31] ClusterAuthorizationFailedError"
    message = f"Bootstrap attempt to bootstrap-0 failed: {reason} (backoff 0.10 secs)"
    record = logging.LogRecord("kafka.net.manager", logging.ERROR, __file__, 1, message, None, None)
    after_connecting.handle(record)
    assert after_connecting.most_telling() == "[Error 31] ClusterAuthorizationFailedError"

    hang_ups = BootstrapFailures()
    hang_ups.handle(_failed("KafkaConnectionError: socket disconnected"))
    assert hang_ups.most_telling() == "KafkaConnectionError: socket disconnected"


@pytest.mark.parametrize(
    ("reason", "remedy"),
    [
        (
            "[Error 58] SaslAuthenticationFailedError: Authentication failed",
            "check LAMBDALINE_KAFKA_SASL_USERNAME and LAMBDALINE_KAFKA_SASL_PASSWORD",
        ),
        (
            "KafkaConnectionError: socket disconnected",
            "the broker hung up or did not answer, as it does when it refuses a login: check "
            "LAMBDALINE_KAFKA_SASL_USERNAME and LAMBDALINE_KAFKA_SASL_PASSWORD, and that its "
            "listener speaks SASL_SSL",
        ),
        (
            "[Error 33] UnsupportedSaslMechanismError",
            "the cluster does not offer kafka_sasl_mechanism SCRAM-SHA-512; set "
            "LAMBDALINE_KAFKA_SASL_MECHANISM to one it does",
        ),
        (
            "KafkaConnectionError: Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate",
            "the broker's certificate is not signed by a CA the client trusts; set "
            "LAMBDALINE_KAFKA_SSL_CAFILE to the CA's PEM file ({cafile} does not hold it)",
        ),
        (
            "InvalidReceiveError: Invalid frame length: 352518912",
            "kafka_security_protocol is SASL_SSL: check that the cluster's listener at "
            "broker-1:9093,broker-2:9093 speaks it (and LAMBDALINE_KAFKA_SASL_MECHANISM, with SASL)",
        ),
    ],
)
def test_an_unreachable_cluster_is_named_with_what_to_do(
    cafile: Path, reason: str, remedy: str
) -> None:
    error = KafkaBootstrapError(KafkaTimeoutError("Unable to bootstrap from broker-1:9093"), reason)
    assert str(unreachable(sasl_ssl(cafile).kafka, error)) == (
        "cannot reach Kafka at broker-1:9093,broker-2:9093 (KafkaBootstrapError: Unable to "
        f"bootstrap from broker-1:9093; the last attempt failed: {reason}); "
        + remedy.format(cafile=cafile)
    )
