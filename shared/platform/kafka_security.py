"""Kafka security: the one place the ``kafka_security_*``, ``kafka_sasl_*`` and
``kafka_ssl_*`` settings (:class:`shared.settings.KafkaSettings`) become client
configuration.

Three kinds of client reach the cluster, each with its own names for the same
things: kafka-python (lambdaline's admin client, consumers and producers), the
Java clients inside Spark's Kafka source and sink (options prefixed ``kafka.``),
and the embedded broker's listener. A client left out would fail only on a
cluster that asks for credentials, so every one of them takes its configuration
from here.

Spark's Kafka clients run in the executors. A file named in an option would have
to exist at that path on every executor; so the CA certificates travel inside the
options, as PEM text (Kafka's ``ssl.truststore.certificates``), the password
inside the JAAS line, and a client certificate's key as unencrypted PKCS#8 text
(``shared.settings.pem`` says why). Spark does not redact these everywhere: a streaming
DataFrame's parsed plan, before it starts, lists it as it is (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from shared.settings import KafkaSettings, environment_name

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The Java login module of each SASL mechanism the settings offer."""


def jaas_quote(value: str) -> str:
    """``value`` as a quoted JAAS option value.

    Kafka parses ``sasl.jaas.config`` with Java's ``StreamTokenizer``, which reads
    a backslash in a quoted string as an escape: a password holding ``"`` or
    ``\\`` must have them escaped, or the line ends early (or means another password).
    """
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas_config(mechanism: str, options: dict[str, str]) -> str:
    """A ``sasl.jaas.config`` value: the mechanism's login module with ``options``."""
    pairs = " ".join(f"{name}={jaas_quote(value)}" for name, value in options.items())
    return f"{LOGIN_MODULES[mechanism]} required {pairs};"


def client_jaas_config(kafka: KafkaSettings) -> str:
    """The JAAS line a Java client logs in with (settings must use SASL)."""
    password = kafka.sasl_password
    assert kafka.sasl_username is not None and password is not None  # see Settings
    return jaas_config(
        kafka.sasl_mechanism,
        {"username": kafka.sasl_username, "password": password.get_secret_value()},
    )


def python_client_configs(kafka: KafkaSettings) -> dict[str, Any]:
    """Security keyword arguments for any kafka-python client (admin, consumer, producer)."""
    configs: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if kafka.uses_sasl:
        assert kafka.sasl_password is not None  # see Settings
        configs |= {
            "sasl_mechanism": kafka.sasl_mechanism,
            "sasl_plain_username": kafka.sasl_username,
            "sasl_plain_password": kafka.sasl_password.get_secret_value(),
        }
    if kafka.uses_tls and kafka.ssl_cafile is not None:
        configs["ssl_cafile"] = str(kafka.ssl_cafile)
    if kafka.uses_tls and kafka.ssl_certfile is not None:
        password = kafka.ssl_key_password
        configs |= {
            "ssl_certfile": str(kafka.ssl_certfile),
            "ssl_keyfile": str(kafka.ssl_keyfile),
            "ssl_password": password.get_secret_value() if password else None,
        }
    return configs


def spark_kafka_options(kafka: KafkaSettings) -> dict[str, str]:
    """Spark Kafka source and sink options that reach the cluster: servers and security."""
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "kafka.security.protocol": kafka.security_protocol,
    }
    if kafka.uses_sasl:
        options["kafka.sasl.mechanism"] = kafka.sasl_mechanism
        options["kafka.sasl.jaas.config"] = client_jaas_config(kafka)
    if kafka.uses_tls and kafka.ssl_cafile is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = kafka.ssl_cafile.read_text()
    if kafka.uses_tls and kafka.ssl_certfile is not None:
        from shared.settings.pem import pkcs8_text  # here: cryptography takes ~0.1 s to import

        assert kafka.ssl_keyfile is not None  # see Settings
        password = kafka.ssl_key_password
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = kafka.ssl_certfile.read_text()
        # as Java reads it on every JDK (shared.settings.pem); it travels as the password would
        options["kafka.ssl.keystore.key"] = pkcs8_text(
            kafka.ssl_keyfile, password.get_secret_value() if password else None
        )
    return options


def security_environment(kafka: KafkaSettings) -> dict[str, str]:
    """The ``LAMBDALINE_KAFKA_*`` security variables that give a child process these settings.

    All of them, an unset one as an empty variable (which unsets it), so a child
    started with them reaches the same cluster the same way whatever its
    parent's environment or settings file says.
    """

    def text(value: object) -> str:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        return "" if value is None else str(value)

    names = (
        "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
        "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password",
    )  # fmt: skip
    return {environment_name(kafka.flat_name(name)): text(getattr(kafka, name)) for name in names}
