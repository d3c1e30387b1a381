"""Kafka security: the one place the ``kafka_security_*``, ``kafka_sasl_*`` and
``kafka_ssl_*`` settings become client configuration.

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
(``shared.pem`` says why). Spark does not redact these everywhere: a streaming
DataFrame's parsed plan, before it starts, lists it as it is (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from shared.settings import Settings

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


def client_jaas_config(settings: Settings) -> str:
    """The JAAS line a Java client logs in with (settings must use SASL)."""
    password = settings.kafka_sasl_password
    assert settings.kafka_sasl_username is not None and password is not None  # see Settings
    return jaas_config(
        settings.kafka_sasl_mechanism,
        {"username": settings.kafka_sasl_username, "password": password.get_secret_value()},
    )


def python_client_configs(settings: Settings) -> dict[str, Any]:
    """Security keyword arguments for any kafka-python client (admin, consumer, producer)."""
    configs: dict[str, Any] = {"security_protocol": settings.kafka_security_protocol}
    if settings.kafka_uses_sasl:
        assert settings.kafka_sasl_password is not None  # see Settings
        configs |= {
            "sasl_mechanism": settings.kafka_sasl_mechanism,
            "sasl_plain_username": settings.kafka_sasl_username,
            "sasl_plain_password": settings.kafka_sasl_password.get_secret_value(),
        }
    if settings.kafka_uses_tls and settings.kafka_ssl_cafile is not None:
        configs["ssl_cafile"] = str(settings.kafka_ssl_cafile)
    if settings.kafka_uses_tls and settings.kafka_ssl_certfile is not None:
        password = settings.kafka_ssl_key_password
        configs |= {
            "ssl_certfile": str(settings.kafka_ssl_certfile),
            "ssl_keyfile": str(settings.kafka_ssl_keyfile),
            "ssl_password": password.get_secret_value() if password else None,
        }
    return configs


def spark_kafka_options(settings: Settings) -> dict[str, str]:
    """Spark Kafka source and sink options that reach the cluster: servers and security."""
    options = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "kafka.security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_uses_sasl:
        options["kafka.sasl.mechanism"] = settings.kafka_sasl_mechanism
        options["kafka.sasl.jaas.config"] = client_jaas_config(settings)
    if settings.kafka_uses_tls and settings.kafka_ssl_cafile is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = settings.kafka_ssl_cafile.read_text()
    if settings.kafka_uses_tls and settings.kafka_ssl_certfile is not None:
        from shared.pem import pkcs8_text  # here: cryptography takes ~0.1 s to import

        assert settings.kafka_ssl_keyfile is not None  # see Settings
        password = settings.kafka_ssl_key_password
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = settings.kafka_ssl_certfile.read_text()
        # as Java reads it on every JDK (shared.pem); it travels as the password would
        options["kafka.ssl.keystore.key"] = pkcs8_text(
            settings.kafka_ssl_keyfile, password.get_secret_value() if password else None
        )
    return options


def security_environment(settings: Settings) -> dict[str, str]:
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
        "kafka_security_protocol", "kafka_sasl_mechanism", "kafka_sasl_username",
        "kafka_sasl_password", "kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile",
        "kafka_ssl_key_password",
    )  # fmt: skip
    return {f"LAMBDALINE_{name.upper()}": text(getattr(settings, name)) for name in names}
