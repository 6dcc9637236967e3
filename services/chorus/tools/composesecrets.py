"""docker-compose.yml's secrets, made inside compose: nobody copies a key or password in.

``python -m chorus.tools.composesecrets`` is the compose service ``secrets``: it runs once
before Kafka and PostgreSQL start, makes what is missing and keeps what exists (a restart
changes no password, so the broker's formatted admin and the database's roles still match).
Every volume it writes is mounted by it and by the one container the volume is for:

- ``kafka``: a CA, the broker's key and certificate (for ``kafka``, ``localhost`` and
  127.0.0.1: compose clients and the host's) and the Kafka admin principal's password, as
  deploy/local/kafka.sh makes them for ``make up``;
- ``postgres``: the PostgreSQL superuser's password;
- ``provisioning`` (the ``setup`` service's): every registry principal's password (its
  SCRAM user and, for a runtime service, its PostgreSQL role: ``chorus access apply`` and
  ``chorus access database`` create them) and the admin logins (``admin.env``);
- ``signing``, its own: every signer's key pair, from which each service gets its share, and
  (in ``key-service-tls/``) the authority of the key service's TLS certificate;
- ``services/<service>``, one per service volume mounted there: ``login.env`` (that
  service's own Kafka principal and PostgreSQL role), the CA, ``key-service-ca.pem`` (what
  the key service's certificate is verified with; the key service also gets that
  certificate and its key, for ``key_service``), and ``signing/``: every signer's public
  key and, when the service signs, its own private key and no other.

The image's entrypoint (deploy/docker/entrypoint.sh) loads ``login.env`` into the service's
environment.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import secrets
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chorus.contracts.registry import Registry, load_registry
from chorus.privacy.signing import make_keys
from chorus.tools.access import local_passwords, principals
from chorus.tools.dbroles import role_url
from chorus.web.tls import LocalTls, key_usage, make_local_tls

ADMIN_USER = "chorus-admin"
"""The Kafka admin principal (a super user), as deploy/local/kafka.sh names it."""
BROKER_CN = "chorus-kafka-broker"
"""The broker's certificate subject: brokers and controllers authenticate each other with it
(mutual TLS on the controller listener), so the broker names it a super user."""
BROKER_NAMES = ("kafka", "localhost")
BROKER_IPS = ("127.0.0.1",)
KEY_SERVICE_NAMES = ("key_service", "localhost", "127.0.0.1")
"""What the key service's certificate is for: its compose name (CHORUS_KEY_STORES), and
its own container (a check from inside it)."""
KEY_SERVICE_CA_FILE = "key-service-ca.pem"
LOGIN_FILE = "login.env"
ADMIN_FILE = "admin.env"


@dataclass(frozen=True)
class Owners:
    """Who reads each volume: the uid its files are handed to (when this runs as root)."""

    chorus: int
    """The chorus image's user (deploy/docker/Dockerfile): services and ``setup``."""
    kafka: int
    """The broker image's user."""


def _write(path: Path, text: str | bytes, *, mode: int = 0o600) -> None:
    """Write ``path`` whole, readable by its owner only (created so: never briefly open)."""
    data = text.encode() if isinstance(text, str) else text
    partial = path.with_name(f".{path.name}.new")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    partial.replace(path)


def _hand_over(folder: Path, uid: int) -> None:
    """``folder`` and everything in it to ``uid``: the reader is another user than this
    issuer (root), and the files are its alone (mode 600 or 700)."""
    if os.geteuid() != 0:
        return
    for path in (folder, *folder.rglob("*")):
        os.chown(path, uid, uid)


def env_lines(values: Mapping[str, str]) -> str:
    """``NAME='value'`` lines a POSIX shell sources (the entrypoint does, with ``set -a``)."""
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


def make_pki(folder: Path) -> None:
    """The CA (``ca.pem``), the broker's PEM keystore (``broker.keystore.pem``: its PKCS#8
    key, then its certificate chain, as Kafka reads one) and the admin's password, unless
    all three exist. Made in a scratch folder and moved in whole."""
    wanted = ("ca.pem", "broker.keystore.pem", "admin.password")
    if all((folder / name).is_file() for name in wanted):
        return
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Chorus compose CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        # What Python 3.13's strict verification asks of an authority and what it issues.
        .add_extension(key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    broker_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in BROKER_NAMES]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in BROKER_IPS]
    broker = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BROKER_CN)]))
        .issuer_name(ca_name)
        .public_key(broker_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        # The broker is a TLS client too: of its own controller listener (mutual TLS).
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(broker_key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = broker_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    scratch = folder / ".new"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700)
    _write(scratch / "ca.pem", ca.public_bytes(pem), mode=0o644)
    _write(scratch / "broker.keystore.pem", key_pem + broker.public_bytes(pem) + ca.public_bytes(pem))
    _write(scratch / "admin.password", secrets.token_urlsafe(24))
    for path in scratch.iterdir():
        path.replace(folder / path.name)
    scratch.rmdir()


def password(path: Path) -> str:
    """The password in ``path``, made (random) when it has none yet."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, secrets.token_urlsafe(24))
    return path.read_text().strip()


@dataclass(frozen=True)
class Layout:
    """Where the issuer finds each volume (the mount points of the compose service ``secrets``)."""

    kafka: Path
    postgres: Path
    provisioning: Path
    signing: Path
    services: Path

    @classmethod
    def under(cls, root: Path) -> Layout:
        return cls(*(root / name for name in ("kafka", "postgres", "provisioning", "signing", "services")))


def issue(layout: Layout, registry: Registry, database_url: str, owners: Owners) -> list[str]:
    """Make every secret of the compose stack that is missing (see the module's docstring);
    the services whose volume was written. ``database_url`` names the server and database
    without a login (``postgresql://postgres:5432/chorus``)."""
    make_pki(layout.kafka)
    admin_password = (layout.kafka / "admin.password").read_text().strip()
    database_admin = password(layout.postgres / "password")
    layout.provisioning.mkdir(parents=True, exist_ok=True)
    users = layout.provisioning / "users"
    passwords = local_passwords(users, principals(registry))
    signing = layout.signing
    make_keys(signing, registry.signers())
    key_tls = make_local_tls(signing / "key-service-tls", "key_service", KEY_SERVICE_NAMES)
    shutil.copyfile(layout.kafka / "ca.pem", layout.provisioning / "ca.pem")
    _write(
        layout.provisioning / ADMIN_FILE,
        env_lines(
            {
                "CHORUS_KAFKA_SASL_USERNAME": ADMIN_USER,
                "CHORUS_KAFKA_SASL_PASSWORD": admin_password,
                "CHORUS_DATABASE_URL": role_url(database_url, "chorus", database_admin),
            }
        ),
    )
    written = [
        _service_volume(folder, registry, passwords, signing, layout.kafka / "ca.pem", key_tls, database_url)
        for folder in sorted(p for p in layout.services.glob("*") if p.is_dir())
    ]
    for folder in (layout.provisioning, *(layout.services / name for name in written)):
        _hand_over(folder, owners.chorus)
    _hand_over(layout.kafka, owners.kafka)
    return written


def _service_volume(
    folder: Path,
    registry: Registry,
    passwords: Mapping[str, str],
    signing: Path,
    ca: Path,
    key_tls: LocalTls,
    database_url: str,
) -> str:
    """Fill the volume of the service named like ``folder``; returns that name."""
    service = folder.name
    principal = registry.principals.services.get(service)
    if principal is None:
        raise SystemExit(f"{folder}: the registry names no service {service!r} (schemas/principals.yaml)")
    login = {"CHORUS_KAFKA_SASL_USERNAME": service, "CHORUS_KAFKA_SASL_PASSWORD": passwords[service]}
    # `chorus access database` gives the runtime services their role, with this password.
    if principal.kind == "runtime":
        login["CHORUS_DATABASE_URL"] = role_url(database_url, service, passwords[service])
    _write(folder / LOGIN_FILE, env_lines(login))
    shutil.copyfile(ca, folder / "ca.pem")
    shutil.copyfile(key_tls.ca_file, folder / KEY_SERVICE_CA_FILE)
    if service == "key_service":  # its data-key API is TLS only
        shutil.copyfile(key_tls.cert_file, folder / key_tls.cert_file.name)
        _write(folder / key_tls.key_file.name, key_tls.key_file.read_bytes())
    own = folder / "signing"
    own.mkdir(mode=0o700, exist_ok=True)
    # Keys of signers no longer in the registry, or another's key left by hand, go.
    for stale in own.glob("*"):
        stale.unlink()
    for public in sorted(signing.glob("*.pub")):
        shutil.copyfile(public, own / public.name)
    if service in registry.signers():
        _write(own / f"{service}.key", (signing / f"{service}.key").read_bytes())
    return service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chorus.tools.composesecrets", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--root", type=Path, default=Path("/issue"), help="Where the volumes are mounted.")
    parser.add_argument("--database-url", default="postgresql://postgres:5432/chorus")
    parser.add_argument("--chorus-uid", type=int, default=os.geteuid())
    parser.add_argument("--kafka-uid", type=int, default=os.geteuid())
    parser.add_argument("--schemas-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    written = issue(
        Layout.under(args.root),
        load_registry(args.schemas_dir),
        args.database_url,
        Owners(chorus=args.chorus_uid, kafka=args.kafka_uid),
    )
    print(f"compose secrets: CA, broker certificate, admin logins; service volumes: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
