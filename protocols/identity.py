"""Keys and certificates of a fleet: the fleet CA, agents' and collectors' Ed25519 signing keys.

Everything here is the ``cryptography`` package (Ed25519 signatures checked by libsodium through
PyNaCl, :func:`verify`); nothing is hand-rolled. The fleet CA is an
ECDSA P-256 key with a self-signed X.509 certificate (P-256, not Ed25519, because the same CA
certifies the broker's TLS server certificate and every TLS stack accepts P-256). Each agent and
each collector has an Ed25519 key; the CA certifies it in an X.509 certificate whose common name
is the vehicle id (or the collector's name) and whose organizational unit says the role
(``vehicle`` or ``collector``). A key is named by its *key id*: the first 16 hex digits of the
SHA-256 of its raw 32-byte public key. See ``docs/trust.md``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

ROLES: Final = ("vehicle", "collector")
#: How long certificates made by ``frota provision`` are valid (days).
CA_DAYS: Final = 20 * 365
KEY_DAYS: Final = 10 * 365


class IdentityError(ValueError):
    """A key or certificate that cannot be read or does not verify; the message says why."""


def new_signing_key() -> ed25519.Ed25519PrivateKey:
    """A fresh Ed25519 key (an agent's or a collector's)."""
    return ed25519.Ed25519PrivateKey.generate()


def raw_public(key: ed25519.Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: ed25519.Ed25519PublicKey) -> str:
    """The key id: 16 hex digits of SHA-256 over the raw public key."""
    return hashlib.sha256(raw_public(key)).hexdigest()[:16]


def private_pem(key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    """PKCS#8 PEM of a private key, unencrypted (the file's mode protects it)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    """PEM of a certificate."""
    return cert.public_bytes(serialization.Encoding.PEM)


def write_secret(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file with mode 0600 (no group or other bits, ever: the file is
    created with that mode, not chmod-ed after being written)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _window(not_before: dt.datetime | None, days: float) -> tuple[dt.datetime, dt.datetime]:
    """A certificate's validity: from ``not_before`` (default: five minutes ago, for clocks a
    little behind) to ``days`` after it (default: ``days`` after now)."""
    if not_before is None:
        now = _now()
        return now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
    return not_before, not_before + dt.timedelta(days=days)


def make_ca(name: str, *, not_before: dt.datetime | None = None, days: float = CA_DAYS,
            key: ec.EllipticCurvePrivateKey | None = None,
            ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new fleet CA: its key and self-signed certificate, valid ``days`` from ``not_before``
    (default: from now). ``key``: an existing CA key, whose certificates then chain to this one
    too (a CA certificate renewed, or one backdated by a test)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start, end = _window(not_before, days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    public_key: ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey,
    days: float,
    not_before: dt.datetime | None = None,
) -> x509.CertificateBuilder:
    start, end = _window(not_before, days)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )


def certify_signing_key(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    name: str,
    role: str,
    public_key: ed25519.Ed25519PublicKey,
    days: float = KEY_DAYS,
    not_before: dt.datetime | None = None,
) -> x509.Certificate:
    """A certificate binding an Ed25519 signing key to ``name`` (vehicle id or collector name)
    in ``role`` (``vehicle`` or ``collector``), valid ``days`` from ``not_before`` (default:
    from now)."""
    if role not in ROLES:
        raise IdentityError(f"role {role!r} is not one of {', '.join(ROLES)}")
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    builder = _issue(ca_key, ca_cert, subject, public_key, days, not_before).add_extension(
        x509.KeyUsage(
            digital_signature=True, content_commitment=True, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False,
        ),
        critical=True,
    )
    return builder.sign(ca_key, hashes.SHA256())


def make_server_cert(
    ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, names: Sequence[str]
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A TLS server key and certificate for the broker, valid for ``names`` (host names or IP
    addresses; the first is the common name)."""
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    cert = (
        _issue(ca_key, ca_cert, subject, key.public_key(), KEY_DAYS)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def load_cert(data: bytes, what: str = "certificate") -> x509.Certificate:
    """A PEM certificate; IdentityError if it is not one."""
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as err:
        raise IdentityError(f"{what}: not a PEM certificate") from err


def load_cert_file(path: Path) -> x509.Certificate:
    """A PEM certificate from a file; IdentityError naming the file otherwise."""
    try:
        return load_cert(path.read_bytes(), str(path))
    except OSError as err:
        raise IdentityError(f"cannot read {path}: {err.strerror}") from err


def load_signing_key(path: Path) -> ed25519.Ed25519PrivateKey:
    """An Ed25519 private key from a PEM file; IdentityError naming the file otherwise."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as err:
        raise IdentityError(f"cannot read {path}: {err.strerror}") from err
    except (ValueError, TypeError) as err:
        raise IdentityError(f"{path}: not an unencrypted PEM private key") from err
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise IdentityError(f"{path}: not an Ed25519 key")
    return key


def load_ca_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The fleet CA's private key; IdentityError naming the file otherwise."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as err:
        raise IdentityError(f"cannot read {path}: {err.strerror}") from err
    except (ValueError, TypeError) as err:
        raise IdentityError(f"{path}: not an unencrypted PEM private key") from err
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise IdentityError(f"{path}: not an ECDSA key (the fleet CA's key)")
    return key


def certified(cert: x509.Certificate, ca_cert: x509.Certificate) -> tuple[str, str]:
    """Check that ``cert`` was issued by ``ca_cert`` (signature) and certifies an Ed25519 key;
    return (role, name). IdentityError says what is wrong. Not *when*: the caller checks
    :func:`valid_at` for the time that matters to it."""
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature) as err:
        raise IdentityError("certificate not issued by the fleet CA") from err
    if not isinstance(cert.public_key(), ed25519.Ed25519PublicKey):
        raise IdentityError("certificate is not for an Ed25519 signing key")
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(units) != 1 or len(names) != 1 or units[0].value not in ROLES:
        raise IdentityError("certificate does not name a role and a subject")
    return str(units[0].value), str(names[0].value)


def validity_ms(cert: x509.Certificate) -> tuple[int, int]:
    """When ``cert`` is valid, in ms since the epoch: from the first through the second, both
    included (RFC 5280 §4.1.2.5; X.509 times are whole seconds)."""
    return (int(cert.not_valid_before_utc.timestamp()) * 1000,
            int(cert.not_valid_after_utc.timestamp()) * 1000)


def valid_at(cert: x509.Certificate, ms: int) -> bool:
    """True when ``ms`` is within ``cert``'s validity period (:func:`validity_ms`).

    :func:`certified` checks who issued a certificate and for what, never when: every place that
    accepts a signature also asks whether the certificate (and the CA's) was valid at the time
    that matters there — a token's check at the bus's now (protocols/inspector_token.py), a
    bundle's ``created`` (protocols/bundle_check.py), an ack at the agent's clock
    (agent/acks.py), a checkpoint when the collector received it (the keyring's periods,
    protocols/keyring.py). See docs/trust.md, "Validity periods"."""
    first, last = validity_ms(cert)
    return first <= ms <= last


def public_key_of(cert: x509.Certificate) -> ed25519.Ed25519PublicKey:
    """The Ed25519 key a certificate certifies (check it with :func:`certified` first)."""
    key = cert.public_key()
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise IdentityError("certificate is not for an Ed25519 signing key")
    return key


def verify(key: ed25519.Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    """True when ``signature`` is ``key``'s Ed25519 signature of ``message``.

    Checked by libsodium (PyNaCl), like the chain's checkpoints (protocols/chain.py): it accepts
    every RFC 8032 signature by the key and refuses, besides what ``cryptography`` refuses, a
    key or R of small order — which no honest signer makes, and which would let a forged key
    "verify" messages it never signed (tests/trust/test_chain.py). One rule for every signature
    Frota checks: acks, bundles, inspector tokens, checkpoints."""
    try:
        VerifyKey(key.public_bytes_raw()).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False     # a signature that is not 64 bytes, or not bytes, is no signature
    return True
