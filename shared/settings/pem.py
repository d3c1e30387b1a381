"""The client certificate and key of mutual TLS, read from PEM files.

kafka-python hands the files to OpenSSL, which reads a key in any PEM form.
Spark's Kafka clients take the key as text in Java's PEM key store, which reads
PKCS#8 only and, before Java 19, cannot decrypt PBES2 (JDK-8286428), OpenSSL's
default encryption. So the key is read here, where settings are read, and Spark
gets it as unencrypted PKCS#8 (:func:`pkcs8_text`), whatever form it has on disk.
"""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes


def private_key(keyfile: Path, password: str | None) -> PrivateKeyTypes:
    """The key in ``keyfile``; ValueError naming the file and what is wrong."""
    try:
        return serialization.load_pem_private_key(
            keyfile.read_bytes(), password.encode() if password is not None else None
        )
    except TypeError:  # cryptography: a password for a plain key, or none for an encrypted one
        if password is None:
            raise ValueError(
                f"{keyfile} is encrypted: set kafka_ssl_key_password "
                "(LAMBDALINE_KAFKA_SSL_KEY_PASSWORD)"
            ) from None
        raise ValueError(f"kafka_ssl_key_password is set but {keyfile} is not encrypted") from None
    except (ValueError, UnsupportedAlgorithm) as error:
        if password is not None and "decrypt" in str(error).lower():
            raise ValueError(f"cannot decrypt {keyfile} with kafka_ssl_key_password") from None
        raise ValueError(f"cannot read the private key in {keyfile} ({error})") from None


def check_pair(certfile: Path, keyfile: Path, password: str | None) -> None:
    """ValueError unless ``keyfile`` holds the key of the first certificate in ``certfile``."""
    key = private_key(keyfile, password)
    try:
        certificate = x509.load_pem_x509_certificates(certfile.read_bytes())[0]
    except ValueError as error:
        raise ValueError(f"cannot read the certificate in {certfile} ({error})") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if certificate.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise ValueError(f"{keyfile} is not the key of the certificate in {certfile}")


def pkcs8_text(keyfile: Path, password: str | None) -> str:
    """The key as Java's PEM key store reads it on every Java: PKCS#8, unencrypted."""
    return (
        private_key(keyfile, password)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
