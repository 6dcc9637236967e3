"""TLS for the APIs that carry secrets (the key service's data keys): a server's
certificate and key, and a local certificate authority (a client's trust is
``chorus.privacy.feature.key_service_trust``).

A deployment brings its own certificates (the Helm chart makes them, or takes a Secret;
compose's ``secrets`` service makes them). A local stack and the testing kit make theirs
with :func:`make_local_tls`: a certificate authority of their own, and a certificate from it
for the names they serve on. Python's :mod:`ssl` does the rest (uvicorn serves with it,
httpx verifies with it), so nothing here speaks TLS itself.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chorus.base.errors import ConfigError

LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")
VALID_DAYS = 825
"""What clients accept for a server certificate (Apple's limit; others are more lenient)."""


@dataclass(frozen=True)
class ServerTls:
    """A server's certificate chain and private key (PEM files)."""

    cert_file: str
    key_file: str

    def uvicorn(self) -> dict[str, str]:
        """uvicorn.Config's arguments that make it serve HTTPS only."""
        return {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}


def server_tls(cert_file: str, key_file: str, *, what: str, variables: tuple[str, str]) -> ServerTls:
    """``cert_file`` and ``key_file`` when both are readable; ConfigError naming the
    variables otherwise (``what`` serves TLS only, so it does not start without them)."""
    missing = [v for v, path in zip(variables, (cert_file, key_file), strict=True) if not path]
    if missing:
        raise ConfigError(f"{what} is served over TLS only: set {' and '.join(missing)}")
    for variable, path in zip(variables, (cert_file, key_file), strict=True):
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{variable}: cannot read {path}")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"{variables[0]}/{variables[1]}: not a certificate and its key ({exc})") from None
    return ServerTls(cert_file, key_file)


@dataclass(frozen=True)
class LocalTls:
    """What :func:`make_local_tls` leaves in its directory."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_local_tls(directory: Path, name: str, hosts: Sequence[str] = LOCAL_NAMES) -> LocalTls:
    """A local certificate authority (``ca.pem``; its key ``ca.key``) and a certificate from
    it for ``hosts`` (``<name>.pem``, ``<name>.key``) in ``directory``, unless they are there.
    Private keys are mode 600. A certificate that no longer covers ``hosts`` is made anew."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, ca_key_file = directory / "ca.pem", directory / "ca.key"
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    now = datetime.datetime.now(datetime.timezone.utc)
    # Python 3.13 verifies strictly (RFC 5280: key identifiers, key usage); an authority an
    # older version made without them is made anew, with its certificates.
    if not (ca_file.exists() and ca_key_file.exists() and _identified(ca_file)):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Chorus local CA")])
        ca = (
            _builder(subject, subject, ca_key.public_key(), now, days=3650)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write_key(ca_key_file, ca_key)
        ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        cert_file.unlink(missing_ok=True)  # issued by a CA that is gone
    current = (
        cert_file.exists() and key_file.exists() and _covers(cert_file, hosts) and _identified(cert_file)
    )
    if not current:
        ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
        loaded = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            _builder(subject, ca.subject, key.public_key(), now, days=VALID_DAYS)
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(loaded.public_key()), critical=False
            )
            .sign(loaded, hashes.SHA256())
        )
        _write_key(key_file, key)
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return LocalTls(ca_file, cert_file, key_file)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _identified(path: Path) -> bool:
    """Whether the certificate at ``path`` names its key (a subject key identifier), as
    strict verification asks of an authority and of what it issued."""
    try:
        x509.load_pem_x509_certificate(path.read_bytes()).extensions.get_extension_for_class(
            x509.SubjectKeyIdentifier
        )
    except (x509.ExtensionNotFound, ValueError):
        return False
    return True


def key_usage(*, ca: bool) -> x509.KeyUsage:
    """What an authority's (``ca``) or a server's certificate may sign: strict verification
    (Python 3.13's default) refuses an authority without it."""
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _covers(cert_file: Path, hosts: Sequence[str]) -> bool:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    held = {str(n.value) for n in names}
    return {str(_general_name(h).value) for h in hosts} <= held


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
