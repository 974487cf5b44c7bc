"""The inspector's token for the bus's roadside page (issue 17 item 4; ``docs/roadside.md``).

The bus may be offline at the roadside, so the agent checks the token by itself, with only the
fleet CA it already holds: a collector signs the token with its certified Ed25519 key and puts
its certificate in the token. A token is three base64url parts joined by dots:

    base64url(claims as RFC 8785 bytes) . base64url(Ed25519 signature of those bytes)
                                        . base64url(the collector's certificate, DER)

Claims: ``type`` ``frota.inspector`` (so no other signed message can pass for one), ``schema``
1, ``id`` (random, for the logs), ``inspector`` (who: name or registration), ``vehicles`` (ids,
or ``["*"]`` for the whole fleet), ``nbf`` and ``exp`` (RFC 3339; at most :data:`MAX_HOURS`
apart). The agent accepts a token when the certificate chains to the fleet CA for role
``collector``, the signature verifies, the vehicle is named and ``nbf <= now < exp``, where the
agent takes for now the later of its clock and the newest device time it holds (a Pi that booted
in the past cannot revive an expired token: the tachograph's and the GPS's times say how late it
is at least).
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from protocols import identity
from protocols.canonical import jcs
from protocols.records import RecordError, ms_to_ts, ts_to_ms

TYPE: Final = "frota.inspector"
SCHEMA: Final = 1
#: The longest a token lives: a shift at the roadside.
MAX_HOURS: Final = 24
#: The longest token text read (a certificate is well under 1 kB).
MAX_CHARS: Final = 4096


class TokenError(ValueError):
    """A token refused; the message says why (shown to the inspector, in English and pt-BR)."""

    def __init__(self, english: str, portuguese: str) -> None:
        super().__init__(english)
        self.portuguese = portuguese


@dataclass(frozen=True)
class Grant:
    """An accepted token: who, which token, until when, issued by which collector."""

    id: str
    inspector: str
    vehicles: tuple[str, ...]
    expires_ms: int
    collector: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue(key: ed25519.Ed25519PrivateKey, cert: x509.Certificate, inspector: str,
          vehicles: Sequence[str], nbf_ms: int, hours: float) -> str:
    """A token for ``inspector`` valid from ``nbf_ms`` for ``hours`` (ValueError beyond
    :data:`MAX_HOURS` or for an empty name or vehicle list)."""
    if not 0 < hours <= MAX_HOURS:
        raise ValueError(f"a token lives at most {MAX_HOURS} hours")
    if not inspector.strip() or len(inspector) > 200:
        raise ValueError("the inspector's name is empty or too long")
    if not vehicles:
        raise ValueError("name the vehicles (or * for the whole fleet)")
    claims = {"type": TYPE, "schema": SCHEMA, "id": secrets.token_hex(8),
              "inspector": inspector.strip(), "vehicles": sorted(set(vehicles)),
              "nbf": ms_to_ts(nbf_ms), "exp": ms_to_ts(nbf_ms + int(hours * 3_600_000))}
    body = jcs(claims)
    der = cert.public_bytes(serialization.Encoding.DER)
    return ".".join((_b64(body), _b64(key.sign(body)), _b64(der)))


def token_id(token: str) -> str:
    """The ``id`` claim of a token this process issued (not checked: for the issuer's log)."""
    return str(orjson.loads(_unb64(token.split(".")[0]))["id"])


def check(token: str, fleet_ca: x509.Certificate, vehicle: str, now_ms: int) -> Grant:
    """The grant of a valid token for ``vehicle`` at ``now_ms``; TokenError says why not."""
    if len(token) > MAX_CHARS or token.count(".") != 2:
        raise TokenError("not an inspector token", "não é um token de fiscal")
    try:
        body, sig, der = (_unb64(part) for part in token.split("."))
        cert = x509.load_der_x509_certificate(der)
        claims: Any = orjson.loads(body)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise TokenError("not an inspector token", "não é um token de fiscal") from None
    try:
        role, collector = identity.certified(cert, fleet_ca)
    except identity.IdentityError:
        raise TokenError("not issued under this fleet's CA",
                         "não foi emitido sob a AC desta frota") from None
    if role != "collector":
        raise TokenError("not issued by a collector", "não foi emitido por um coletor")
    if not identity.verify(identity.public_key_of(cert), sig, body):
        raise TokenError("the signature does not verify", "a assinatura não confere")
    if not isinstance(claims, dict) or claims.get("type") != TYPE or claims.get("schema") != SCHEMA:
        raise TokenError("not an inspector token", "não é um token de fiscal")
    vehicles, who, tid = claims.get("vehicles"), claims.get("inspector"), claims.get("id")
    try:
        nbf, exp = ts_to_ms(str(claims.get("nbf"))), ts_to_ms(str(claims.get("exp")))
    except RecordError:
        raise TokenError("not an inspector token", "não é um token de fiscal") from None
    if (not isinstance(vehicles, list) or not all(isinstance(v, str) for v in vehicles)
            or not isinstance(who, str) or not isinstance(tid, str)
            or exp - nbf > MAX_HOURS * 3_600_000):
        raise TokenError("not an inspector token", "não é um token de fiscal")
    if vehicle not in vehicles and "*" not in vehicles:
        raise TokenError(f"not valid for vehicle {vehicle}", f"não vale para o veículo {vehicle}")
    if now_ms < nbf:
        raise TokenError("not valid yet", "ainda não vale")
    if now_ms >= exp:
        raise TokenError("expired", "expirou")
    return Grant(tid, who, tuple(vehicles), exp, collector)
