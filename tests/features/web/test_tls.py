"""The local certificate authorities Chorus makes (the key service's, compose's broker)
verify under the strict RFC 5280 profile Python 3.13's ssl module applies by default
(VERIFY_X509_STRICT): an authority without key usage or key identifiers is refused there."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store

from chorus.tools.composesecrets import make_pki
from chorus.web.tls import make_local_tls


def verified(ca_pem: bytes, chain_pem: bytes, host: str) -> None:
    """Raise unless the first certificate of ``chain_pem`` verifies for ``host`` from ``ca_pem``."""
    [ca] = x509.load_pem_x509_certificates(ca_pem)
    leaf = x509.load_pem_x509_certificates(chain_pem)[0]
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(host))
    verifier.verify(leaf, [])


def test_the_key_services_local_certificate_verifies_strictly(tmp_path: Path) -> None:
    made = make_local_tls(tmp_path, "key_service")
    verified(made.ca_file.read_bytes(), made.cert_file.read_bytes(), "localhost")


def test_an_authority_made_without_key_identifiers_is_made_anew(tmp_path: Path) -> None:
    """What an older version left in .local/tls: the same names, no key identifiers."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Chorus local CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    old = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=9))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (tmp_path / "ca.pem").write_bytes(old.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    made = make_local_tls(tmp_path, "key_service")
    assert made.ca_file.read_bytes() != old.public_bytes(serialization.Encoding.PEM)
    verified(made.ca_file.read_bytes(), made.cert_file.read_bytes(), "localhost")


def test_composes_broker_certificate_verifies_strictly(tmp_path: Path) -> None:
    make_pki(tmp_path)
    keystore = (tmp_path / "broker.keystore.pem").read_bytes()
    verified((tmp_path / "ca.pem").read_bytes(), keystore, "kafka")
