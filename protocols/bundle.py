"""The signed bundle's format, shared by its makers and its checker (``docs/roadside.md``).

A bundle is a ZIP: data files (``records.jsonl`` first), ``manifest.json`` (RFC 8785) naming every
data file with its size and SHA-256, ``manifest.sig`` (base64 Ed25519 signature of the manifest's
bytes) and the certificates that chain the signing key to the fleet CA (``certs/ca.pem`` and
``certs/ROLE.pem``, ROLE ``collector`` for the collector's bundles, ``vehicle`` for the agent's).
The collector makes them (``collector/web/export.py``),
``frota verify BUNDLE`` checks them (``protocols/bundle_check.py``).

``chains`` in the manifest sums up each agent's hash chain in ``records.jsonl`` (first seq and
its ``prev``, last seq and its hash, how many records) so that a record removed, changed or
added at either end of a chain is found too, not only between two records.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from protocols.canonical import jcs

BUNDLE_SCHEMA: Final = 1
KIND: Final = "frota.bundle"
RECORDS: Final = "records.jsonl"
MANIFEST: Final = "manifest.json"
SIGNATURE: Final = "manifest.sig"
CA_CERT: Final = "certs/ca.pem"
#: Roles whose certified key may sign a bundle.
SIGNER_ROLES: Final = ("collector", "vehicle")


@dataclass(frozen=True)
class BundleSigner:
    """Who signs bundles: the collector's (or the vehicle's) name, key id, certificate and CA
    (PEM), and a function signing bytes with its key. ``role`` names the certificate's file."""

    name: str
    key_id: str
    cert_pem: str
    ca_pem: str
    sign: Callable[[bytes], bytes]
    role: str = "collector"


def chains(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """Each agent's chain among canonical record lines, for the manifest: ``agent``,
    ``first_seq``, ``first_prev`` (None when unchained), ``last_seq``, ``last_hash``, ``records``.
    Operator entries are a chain of their own (agent ``operator``, chained by the collector,
    docs/trust.md); records without ``agent``/``seq`` are not listed."""
    by_agent: dict[str, dict[str, Any]] = {}
    for line in lines:
        rec = orjson.loads(line)
        agent, seq = rec.get("agent"), rec.get("seq")
        if not isinstance(agent, str) or type(seq) is not int:
            continue
        digest = hashlib.sha256(line).hexdigest()  # a canonical line: its chain hash
        entry = by_agent.get(agent)
        if entry is None:
            by_agent[agent] = {"agent": agent, "first_seq": seq, "first_prev": rec.get("prev"),
                               "last_seq": seq, "last_hash": digest, "records": 1}
            continue
        entry["records"] += 1
        if seq < entry["first_seq"]:
            entry["first_seq"], entry["first_prev"] = seq, rec.get("prev")
        if seq > entry["last_seq"]:
            entry["last_seq"], entry["last_hash"] = seq, digest
    return [by_agent[a] for a in sorted(by_agent)]


def file_entry(name: str, data: bytes) -> dict[str, Any]:
    """A data file as the manifest lists it."""
    return {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def pack(files: Mapping[str, bytes], manifest: dict[str, Any],
         signer: BundleSigner | None) -> bytes:
    """The ZIP bytes: ``files``, then the manifest (``manifest`` completed with ``files``,
    ``signed`` and ``signer``), its signature and the certificates when ``signer`` is given."""
    manifest = {**manifest, "schema": BUNDLE_SCHEMA, "kind": KIND, "signed": signer is not None,
                "files": [file_entry(name, data) for name, data in files.items()]}
    if signer is not None:
        manifest["signer"] = {signer.role: signer.name, "key": signer.key_id}
    manifest_bytes = jcs(manifest)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(MANIFEST, manifest_bytes)
        if signer is not None:
            zf.writestr(SIGNATURE, base64.b64encode(signer.sign(manifest_bytes)) + b"\n")
            zf.writestr(f"certs/{signer.role}.pem", signer.cert_pem)
            zf.writestr(CA_CERT, signer.ca_pem)
    return out.getvalue()
