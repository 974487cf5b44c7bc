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
from typing import Any, BinaryIO, Final

import orjson

from protocols.canonical import jcs

BUNDLE_SCHEMA: Final = 1
KIND: Final = "frota.bundle"
RECORDS: Final = "records.jsonl"
MANIFEST: Final = "manifest.json"
SIGNATURE: Final = "manifest.sig"
CA_CERT: Final = "certs/ca.pem"
#: How many bytes of a streamed file :func:`pack_to` gathers before writing them to the ZIP.
_WRITE_BYTES: Final = 1 << 20
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


class Chains:
    """Each agent's chain among canonical record lines, summed up line by line (so a bundle can
    be streamed): see :func:`chains`."""

    def __init__(self) -> None:
        self._by_agent: dict[str, dict[str, Any]] = {}

    def add(self, line: bytes, rec: Any = None) -> None:
        """Count one canonical line (``rec``: the line already parsed, if the caller has it)."""
        rec = orjson.loads(line) if rec is None else rec
        agent, seq = rec.get("agent"), rec.get("seq")
        if not isinstance(agent, str) or type(seq) is not int:
            return
        digest = hashlib.sha256(line).hexdigest()  # a canonical line: its chain hash
        entry = self._by_agent.get(agent)
        if entry is None:
            self._by_agent[agent] = {"agent": agent, "first_seq": seq,
                                     "first_prev": rec.get("prev"), "last_seq": seq,
                                     "last_hash": digest, "records": 1}
            return
        entry["records"] += 1
        if seq < entry["first_seq"]:
            entry["first_seq"], entry["first_prev"] = seq, rec.get("prev")
        if seq > entry["last_seq"]:
            entry["last_seq"], entry["last_hash"] = seq, digest

    def result(self) -> list[dict[str, Any]]:
        """The manifest's ``chains``, by agent."""
        return [self._by_agent[a] for a in sorted(self._by_agent)]


def chains(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """Each agent's chain among canonical record lines, for the manifest: ``agent``,
    ``first_seq``, ``first_prev`` (None when unchained), ``last_seq``, ``last_hash``, ``records``.
    Operator entries are a chain of their own (agent ``operator``, chained by the collector,
    docs/trust.md); records without ``agent``/``seq`` are not listed."""
    summed = Chains()
    for line in lines:
        summed.add(line)
    return summed.result()


def file_entry(name: str, data: bytes) -> dict[str, Any]:
    """A data file as the manifest lists it."""
    return {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def pack_to(out: BinaryIO, files: Iterable[tuple[str, Iterable[bytes]]],
            finish: Callable[[], dict[str, Any]], signer: BundleSigner | None) -> None:
    """The bundle written to ``out`` as its data files' chunks come, never whole in memory (the
    bus's export of 31 days: millions of records on a Pi): each file's size and SHA-256 counted
    on the way; then the manifest (``finish()``, called once every file is written, so that the
    caller can count as the chunks go; completed as :func:`pack` completes it), its signature and
    the certificates. The same content as :func:`pack`'s; the ZIP's headers may differ (ZIP64
    members)."""
    listed: list[dict[str, Any]] = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, chunks in files:
            digest, size = hashlib.sha256(), 0
            with zf.open(name, "w", force_zip64=True) as member:
                pending: list[bytes] = []   # chunks (a record's line) gathered into ~1 MiB
                held = 0                    # writes: one per line costs the ZIP's CRC and
                for chunk in chunks:        # deflate calls more than the lines themselves
                    pending.append(chunk)
                    held += len(chunk)
                    if held >= _WRITE_BYTES:
                        block = b"".join(pending)
                        member.write(block)
                        digest.update(block)
                        size, pending, held = size + len(block), [], 0
                block = b"".join(pending)
                member.write(block)
                digest.update(block)
                size += len(block)
            listed.append({"name": name, "bytes": size, "sha256": digest.hexdigest()})
        manifest = {**finish(), "schema": BUNDLE_SCHEMA, "kind": KIND,
                    "signed": signer is not None, "files": listed}
        _seal(zf, manifest, signer)


def _seal(zf: zipfile.ZipFile, manifest: dict[str, Any], signer: BundleSigner | None) -> None:
    """The manifest (with ``signer``), its signature and the certificates, into ``zf``."""
    if signer is not None:
        manifest["signer"] = {signer.role: signer.name, "key": signer.key_id}
    manifest_bytes = jcs(manifest)
    zf.writestr(MANIFEST, manifest_bytes)
    if signer is not None:
        zf.writestr(SIGNATURE, base64.b64encode(signer.sign(manifest_bytes)) + b"\n")
        zf.writestr(f"certs/{signer.role}.pem", signer.cert_pem)
        zf.writestr(CA_CERT, signer.ca_pem)


def pack(files: Mapping[str, bytes], manifest: dict[str, Any],
         signer: BundleSigner | None) -> bytes:
    """The ZIP bytes: ``files``, then the manifest (``manifest`` completed with ``files``,
    ``signed`` and ``signer``), its signature and the certificates when ``signer`` is given."""
    manifest = {**manifest, "schema": BUNDLE_SCHEMA, "kind": KIND, "signed": signer is not None,
                "files": [file_entry(name, data) for name, data in files.items()]}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        _seal(zf, manifest, signer)
    return out.getvalue()
