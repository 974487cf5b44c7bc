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
``collector``, that certificate and the CA's are valid at now, the signature verifies, the
vehicle is named, the collector's certificate covers the whole of ``nbf..exp`` (a token that
would outlive its issuer's certificate is refused, never capped: :func:`issue` refuses to make
one, so the office renews the collector's key instead of handing out a token that dies early)
and ``nbf <= now < exp``, where the agent takes for now the later of its clock and the newest
device time it holds (a Pi that booted in the past cannot revive an expired token: the
tachograph's and the GPS's times say how late it is at least).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
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


def _br(ms: int) -> str:
    """A time as the pt-BR messages give it: ``DD/MM/AAAA HH:MM:SS UTC`` (the token is checked
    before the page knows which local time to show)."""
    try:  # a certificate's times are datetimes (years 1 to 9999); a token's are 1970 to 2100
        when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return ms_to_ts(ms)
    return when.strftime("%d/%m/%Y %H:%M:%S UTC")


def covers(cert: x509.Certificate, nbf_ms: int, exp_ms: int) -> bool:
    """True when ``cert`` is valid for the whole of a token's life: from ``nbf`` through the
    last millisecond before ``exp`` (the certificate's ends are included, RFC 5280)."""
    first, last = identity.validity_ms(cert)
    return first <= nbf_ms and exp_ms - 1 <= last


def _valid_now(cert: x509.Certificate, now_ms: int, english: str, portuguese: str) -> None:
    """TokenError unless ``cert`` (``english``/``portuguese`` name it) is valid at now."""
    first, last = identity.validity_ms(cert)
    if now_ms < first:
        raise TokenError(f"{english} is not valid yet (valid from {ms_to_ts(first)})",
                         f"{portuguese} ainda não vale (vale a partir de {_br(first)})")
    if now_ms > last:
        raise TokenError(f"{english} expired at {ms_to_ts(last)}",
                         f"{portuguese} expirou em {_br(last)}")


def issue(key: ed25519.Ed25519PrivateKey, cert: x509.Certificate, inspector: str,
          vehicles: Sequence[str], nbf_ms: int, hours: float) -> str:
    """A token for ``inspector`` valid from ``nbf_ms`` for ``hours`` (ValueError beyond
    :data:`MAX_HOURS`, for an empty name or vehicle list, or for a token that ``cert`` would
    not cover: the bus refuses those)."""
    if not 0 < hours <= MAX_HOURS:
        raise ValueError(f"a token lives at most {MAX_HOURS} hours")
    exp_ms = nbf_ms + int(hours * 3_600_000)
    if not covers(cert, nbf_ms, exp_ms):
        first, last = identity.validity_ms(cert)
        raise ValueError(
            f"a token from {ms_to_ts(nbf_ms)} to {ms_to_ts(exp_ms)} would not lie within the "
            f"collector's certificate (valid {ms_to_ts(first)} to {ms_to_ts(last)}), and buses "
            "refuse such tokens: renew the collector's key, or issue a shorter token")
    if not inspector.strip() or len(inspector) > 200:
        raise ValueError("the inspector's name is empty or too long")
    if not vehicles:
        raise ValueError("name the vehicles (or * for the whole fleet)")
    claims = {"type": TYPE, "schema": SCHEMA, "id": secrets.token_hex(8),
              "inspector": inspector.strip(), "vehicles": sorted(set(vehicles)),
              "nbf": ms_to_ts(nbf_ms), "exp": ms_to_ts(exp_ms)}
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
    # certified() says who, not when: both certificates must be valid at the bus's now
    _valid_now(fleet_ca, now_ms, "the fleet CA's certificate", "o certificado da AC da frota")
    _valid_now(cert, now_ms, f"the certificate of collector {collector}",
               f"o certificado do coletor {collector}")
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
    if not covers(cert, nbf, exp):
        first, last = identity.validity_ms(cert)
        raise TokenError(
            f"the token ({ms_to_ts(nbf)} to {ms_to_ts(exp)}) does not lie within the "
            f"certificate of collector {collector} that issued it (valid {ms_to_ts(first)} to "
            f"{ms_to_ts(last)})",
            f"o token ({_br(nbf)} a {_br(exp)}) não cabe na validade do certificado do coletor "
            f"{collector} que o emitiu ({_br(first)} a {_br(last)})")
    if now_ms < nbf:
        raise TokenError("not valid yet", "ainda não vale")
    if now_ms >= exp:
        raise TokenError("expired", "expirou")
    return Grant(tid, who, tuple(vehicles), exp, collector)
