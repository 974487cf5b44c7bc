"""The fleet's keyring: every signing key the fleet CA has certified, with its validity period.

One JSON file (``DIR/keyring.json``, written by ``frota provision``) read by the collector and by
``frota verify``. Revoking a bus sets ``revoked`` on its entries and keeps them: a checkpoint the
collector received before that time still verifies (last year's records stay evidence), one
received later does not. Every entry's certificate is checked against the fleet CA when the file is
read; an entry that does not verify is left out and reported (:attr:`Keyring.problems`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from protocols.identity import (
    IdentityError,
    certified,
    key_id,
    load_cert,
    public_key_of,
    validity_ms,
)
from protocols.records import RecordError, ms_to_ts, ts_to_ms

KEYRING_SCHEMA: Final = 1


@dataclass(frozen=True)
class KeyEntry:
    """One certified signing key."""

    role: str
    name: str
    key_id: str
    key: ed25519.Ed25519PublicKey
    not_before_ms: int
    not_after_ms: int
    revoked_ms: int | None

    def valid_at(self, ms: int) -> bool:
        """True when the key was certified and not revoked at ``ms``: within its certificate's
        validity and the fleet CA's, both ends included (RFC 5280, as
        :func:`protocols.identity.valid_at`), and before the revocation."""
        if self.revoked_ms is not None and ms >= self.revoked_ms:
            return False
        return self.not_before_ms <= ms <= self.not_after_ms


def _period(cert: x509.Certificate, ca_cert: x509.Certificate) -> tuple[int, int]:
    """When a key is certified: its certificate's validity within the fleet CA's (a key is
    trusted only while the certificate that certifies it and the CA's are both valid)."""
    first, last = validity_ms(cert)
    ca_first, ca_last = validity_ms(ca_cert)
    return max(first, ca_first), min(last, ca_last)


class Keyring:
    """The verified entries of a keyring file."""

    def __init__(self, entries: list[KeyEntry], problems: list[str] | None = None) -> None:
        self.entries = entries
        self.problems = problems or []
        self._by_id = {(e.role, e.name, e.key_id): e for e in entries}

    def find(self, role: str, name: str, kid: str) -> KeyEntry | None:
        """The entry of key ``kid`` certified for ``name`` in ``role``, or None."""
        return self._by_id.get((role, name, kid))

    def checkpoint_signer(self, vehicle: str, agent: str, kid: str) -> KeyEntry | None:
        """Who may sign the checkpoints of (vehicle, agent): the vehicle's own certified key,
        and for the entries made at the collector (agent ``operator``) any collector's."""
        if agent != "operator":
            return self.find("vehicle", vehicle, kid)
        return next((e for e in self.entries if e.role == "collector" and e.key_id == kid), None)

    def current(self, role: str, name: str) -> list[KeyEntry]:
        """The entries for ``name`` in ``role`` that are not revoked."""
        return [e for e in self.entries if e.role == role and e.name == name and e.revoked_ms is None]


def entry_json(cert: x509.Certificate, revoked_ms: int | None = None) -> dict[str, Any]:
    """A keyring file entry for a certificate (checked by :func:`load_keyring` when read)."""
    from protocols.identity import cert_pem

    units = cert.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATIONAL_UNIT_NAME)
    names = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    first, last = validity_ms(cert)
    return {
        "role": str(units[0].value),
        "name": str(names[0].value),
        "key_id": key_id(public_key_of(cert)),
        "not_before": ms_to_ts(first),
        "not_after": ms_to_ts(last),
        "revoked": None if revoked_ms is None else ms_to_ts(revoked_ms),
        "cert": cert_pem(cert).decode(),
    }


def read_entries(path: Path) -> list[dict[str, Any]]:
    """The raw entries of a keyring file (an empty list for a missing file)."""
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise IdentityError(f"{path}: cannot read the keyring: {err}") from err
    if not isinstance(doc, dict) or doc.get("schema") != KEYRING_SCHEMA:
        raise IdentityError(f"{path}: not a keyring (schema {KEYRING_SCHEMA})")
    entries = doc.get("keys")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise IdentityError(f"{path}: 'keys' is not a list of objects")
    return entries


def write_entries(path: Path, entries: list[dict[str, Any]]) -> None:
    """Replace a keyring file atomically (public material: mode 0644)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"schema": KEYRING_SCHEMA, "keys": entries}, indent=1) + "\n")
    os.replace(tmp, path)


def load_keyring(path: Path, ca_cert: x509.Certificate) -> Keyring:
    """Read a keyring file and check every entry's certificate against the fleet CA."""
    entries: list[KeyEntry] = []
    problems: list[str] = []
    for n, raw in enumerate(read_entries(path)):
        try:
            cert = load_cert(str(raw.get("cert", "")).encode(), f"keys[{n}].cert")
            role, name = certified(cert, ca_cert)
            key = public_key_of(cert)
            revoked = raw.get("revoked")
            first, last = _period(cert, ca_cert)
            entries.append(
                KeyEntry(
                    role=role,
                    name=name,
                    key_id=key_id(key),
                    key=key,
                    not_before_ms=first,
                    not_after_ms=last,
                    revoked_ms=None if revoked is None else ts_to_ms(str(revoked)),
                )
            )
        except (IdentityError, RecordError) as err:
            problems.append(f"{path}: keys[{n}]: {err}")
    return Keyring(entries, problems)
