"""Client certificates for the mutual-TLS tests, made with ``cryptography``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class ClientCertificate:
    certfile: Path
    keyfile: Path


def client_certificate(
    folder: Path,
    name: str = "lambdaline-client",
    password: str | None = None,
    key_format: Literal["PKCS8", "PKCS1"] = "PKCS8",
) -> ClientCertificate:
    """A self-signed client certificate and its RSA key, as PEM files in ``folder``.

    The key is PKCS#8 or PKCS#1 (``-----BEGIN RSA PRIVATE KEY-----``), encrypted
    with ``password`` if given (PKCS#8 by PBES2, which Java 17 cannot decrypt).
    """
    folder.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())  # PBES2, AES-256
        if password
        else serialization.NoEncryption()
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8
        if key_format == "PKCS8"
        else serialization.PrivateFormat.TraditionalOpenSSL,
        encryption,
    )
    paths = ClientCertificate(folder / f"{name}.pem", folder / f"{name}.key")
    paths.certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    paths.keyfile.write_bytes(key_pem)
    paths.keyfile.chmod(0o600)
    return paths
