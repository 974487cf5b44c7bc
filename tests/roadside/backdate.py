"""A provisioned fleet's certificates re-made to be valid from a chosen time.

``frota provision`` certifies keys from now on; the roadside tests' records and tokens are of
2026-03-02 (tests/trust/fleet.py), and a certificate is checked at the time that matters (a
token at the bus's now, a bundle at its ``created``; docs/trust.md, "Validity periods"). Every
certificate of the folder is re-signed by the same CA key with the same subject, key and
extensions, valid from ``since``: what the fleet trusts does not change, only since when.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from protocols import identity
from protocols.keyring import entry_json, read_entries, write_entries


def _resign(old: x509.Certificate, issuer: x509.Name, ca_key: object, since: dt.datetime,
            days: int) -> x509.Certificate:
    builder = (x509.CertificateBuilder().subject_name(old.subject).issuer_name(issuer)
               .public_key(old.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(since).not_valid_after(since + dt.timedelta(days=days)))
    for ext in old.extensions:
        builder = builder.add_extension(ext.value, ext.critical)
    return builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]


def backdate_fleet(folder: Path, since: dt.datetime) -> None:
    """Every ``*.crt`` under ``folder`` (the CA's copies alike) and the keyring's certificates
    valid from ``since``: the CA for :data:`identity.CA_DAYS`, the others for
    :data:`identity.KEY_DAYS`."""
    ca_key = identity.load_ca_key(folder / "ca" / "ca.key")
    old_ca = identity.load_cert_file(folder / "ca.crt")
    new: dict[bytes, x509.Certificate] = {
        old_ca.fingerprint(hashes.SHA256()): _resign(old_ca, old_ca.subject, ca_key, since,
                                                     identity.CA_DAYS)}

    def remade(old: x509.Certificate) -> x509.Certificate:
        fp = old.fingerprint(hashes.SHA256())
        if fp not in new:
            new[fp] = _resign(old, old.issuer, ca_key, since, identity.KEY_DAYS)
        return new[fp]

    for path in folder.rglob("*.crt"):
        path.write_bytes(identity.cert_pem(remade(identity.load_cert_file(path))))
    keyring = folder / "keyring.json"
    entries = read_entries(keyring)
    for n, entry in enumerate(entries):
        cert = remade(identity.load_cert(str(entry["cert"]).encode()))
        revoked = entry.get("revoked")
        entries[n] = entry_json(cert) | {"revoked": revoked}
    write_entries(keyring, entries)
