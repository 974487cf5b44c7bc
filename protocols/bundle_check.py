"""Checking a bundle without the collector (``frota verify BUNDLE``, ``docs/roadside.md``).

Every byte of a bundle is hostile: the ZIP's sizes are bounded before anything is read, every
JSON value is type-checked, and whatever is wrong becomes a :class:`Problem` saying where — never
an exception. Checked: the manifest's signature by the key its certificate certifies, that
certificate issued by the fleet CA (``--ca``; else the bundle's own CA, said so) for a role that
may sign (a vehicle's key only for its own vehicle), that certificate and the CA's valid at the
manifest's ``created`` (when the signer says it signed: a bundle claiming a time outside its
certificate's validity is a problem), every file's SHA-256 and size, no file
beyond those listed, ``records.jsonl`` in canonical form, its count, and each agent's hash chain:
duplicates, a ``prev`` that does not match the record before (a record changed, inserted or
removed there), seq gaps (records missing) — followed through the manifest's ``outside`` links
of seqs whose records lie outside the period — and the chain's ends against the manifest's
``chains`` (a record changed, removed or added at either end).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import itertools
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography import x509

from protocols import identity
from protocols.bundle import (
    BUNDLE_SCHEMA,
    CA_CERT,
    KIND,
    MANIFEST,
    RECORDS,
    SIGNATURE,
    SIGNER_ROLES,
)
from protocols.canonical import canonical
from protocols.chain import GENESIS
from protocols.keyring import Keyring
from protocols.records import RecordError, ms_to_ts, ts_to_ms

#: The largest member read (bytes): 31 days of a bus at 1 Hz are about 0.75 GB of records.
MAX_MEMBER = 2 << 30
MAX_MEMBERS = 200
#: The most bytes read from all members together (each is held in memory): a bundle of 200
#: members of 2 GiB each must not exhaust the inspector's computer.
MAX_TOTAL = MAX_MEMBER + (64 << 20)
#: The largest bundle file checked: its members' bounded total (compressed no larger) and room
#: for the ZIP's own headers.
MAX_BUNDLE = MAX_TOTAL + (64 << 20)
#: The most bytes of the ZIP's central directory (46 bytes and a name a member: a bundle's is a
#: few KB). ``zipfile`` makes an object of every entry the directory lists when it opens the
#: file, before any count can be checked: 200,000 empty members, a 17 MB file, cost 120 MB
#: of memory, and a 2 GB one would take the inspector's computer down.
MAX_DIRECTORY = 1 << 20
#: CPython's reader of the ZIP's end record (what ``zipfile.ZipFile`` itself reads first, so
#: the directory's size bounded here is the one it reads); private, hence looked up.
_END_RECORD: Any = getattr(zipfile, "_EndRecData", None)
_DIRECTORY_SIZE: int = getattr(zipfile, "_ECD_SIZE", 5)


@dataclass(frozen=True)
class Problem:
    """One thing wrong: a code (the message's key, see frota/commands/verify_bundle.py), where
    (a file, line, agent and seq when known) and details."""

    code: str
    file: str | None = None
    line: int | None = None
    agent: str | None = None
    seq: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class BundleReport:
    """What a check found."""

    manifest: dict[str, Any] = field(default_factory=dict)
    signer_role: str | None = None
    signer_name: str | None = None
    ca_fingerprint: str | None = None
    ca_given: bool = False
    records: int = 0
    chained: int = 0
    outside: int = 0  # links of seqs outside the period followed
    unchained: int = 0
    agents: dict[str, tuple[int, int]] = field(default_factory=dict)  # agent: (first, last) seq
    problems: list[Problem] = field(default_factory=list)
    #: with a keyring: whether the signer's key was found in it, and when it was revoked
    keyring_checked: bool = False
    signer_revoked: str | None = None
    #: the certificates' validity (RFC 3339 from, to) by ``signer`` and ``ca``, once checked
    validity: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def intact(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


def check_bundle(data: bytes, fleet_ca: x509.Certificate | None,
                 keyring: Keyring | None = None) -> BundleReport:
    """Check the bundle's bytes; ``fleet_ca`` is the inspector's fleet CA (None: the bundle's);
    ``keyring`` the fleet's keyring (checked against ``fleet_ca``): the signer's key must be in
    it and not revoked when the manifest says the bundle was made."""
    report = BundleReport(ca_given=fleet_ca is not None)
    if len(data) > MAX_BUNDLE or _directory_size(data) > MAX_DIRECTORY:
        report.problems.append(Problem("too_large"))
        return report
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        report.problems.append(Problem("not_a_bundle"))
        return report
    if (len(infos) > MAX_MEMBERS or any(i.file_size > MAX_MEMBER for i in infos)
            or sum(i.file_size for i in infos) > MAX_TOTAL):
        report.problems.append(Problem("too_large"))
        return report
    members: dict[str, bytes] = {}
    for info in infos:
        if info.filename in members:
            # two members of one name: the checker would read one, an unzip tool may show the
            # other (a decoy before the signed file); a signed bundle never has them
            report.problems.append(Problem("duplicate_member", file=info.filename))
            continue
        try:
            members[info.filename] = zf.read(info)
        except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError, EOFError):
            report.problems.append(Problem("unreadable", file=info.filename))
    manifest_bytes = members.get(MANIFEST)
    manifest = _object(manifest_bytes)
    if manifest is None or manifest.get("kind") != KIND:
        report.problems.append(Problem("no_manifest", file=MANIFEST))
        return report
    report.manifest = manifest
    if manifest.get("schema") != BUNDLE_SCHEMA:
        report.problems.append(Problem("schema", file=MANIFEST,
                                       detail={"schema": manifest.get("schema")}))
        return report
    assert manifest_bytes is not None
    _check_signature(report, manifest_bytes, members, fleet_ca, keyring)
    listed = _check_files(report, members)
    if RECORDS in listed and RECORDS in members:
        _check_records(report, members[RECORDS])
    return report


def _directory_size(data: bytes) -> int:
    """The size of the ZIP's central directory as its end record says (0 when there is none
    to read: ``zipfile`` then refuses the file)."""
    if _END_RECORD is None:
        return 0
    try:
        end = _END_RECORD(io.BytesIO(data))
    except (OSError, ValueError, struct.error):
        return 0
    return int(end[_DIRECTORY_SIZE]) if end else 0


def _object(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _check_signature(report: BundleReport, manifest_bytes: bytes, members: dict[str, bytes],
                     fleet_ca: x509.Certificate | None, keyring: Keyring | None) -> None:
    manifest = report.manifest
    if manifest.get("signed") is not True or SIGNATURE not in members:
        report.problems.append(Problem("unsigned", file=SIGNATURE))
        return
    try:
        bundled_ca = identity.load_cert(members.get(CA_CERT, b""), "the bundle's CA certificate")
    except identity.IdentityError:
        bundled_ca = None
    ca = fleet_ca or bundled_ca
    if ca is None:
        report.problems.append(Problem("no_ca", file=CA_CERT))
        return
    report.ca_fingerprint = ca.fingerprint(_sha256()).hex()
    signer = manifest.get("signer")
    roles = [r for r in SIGNER_ROLES if isinstance(signer, dict) and r in signer]
    if len(roles) != 1:
        report.problems.append(Problem("no_signer", file=MANIFEST))
        return
    role = roles[0]
    pem = members.get(f"certs/{role}.pem")
    try:
        cert = identity.load_cert(pem or b"", "the signer's certificate")
        cert_role, name = identity.certified(cert, ca)
    except identity.IdentityError as err:
        report.problems.append(Problem("bad_certificate", file=f"certs/{role}.pem",
                                       detail={"why": str(err)}))
        return
    report.signer_role, report.signer_name = cert_role, name
    if cert_role != role or (role == "vehicle" and name != manifest.get("vehicle")):
        report.problems.append(Problem("wrong_signer", file=f"certs/{role}.pem",
                                       detail={"role": cert_role, "name": name}))
        return
    _check_times(report, cert, ca, f"certs/{role}.pem")
    try:
        raw = base64.b64decode(members[SIGNATURE].strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if not identity.verify(identity.public_key_of(cert), raw, manifest_bytes):
        report.problems.append(Problem("bad_signature", file=SIGNATURE))
    if keyring is not None:
        _check_keyring(report, keyring, cert_role, name, identity.public_key_of(cert))


def _check_times(report: BundleReport, cert: x509.Certificate, ca: x509.Certificate,
                 cert_file: str) -> None:
    """The signer's certificate and the CA's valid at the manifest's ``created`` (both ends
    included, RFC 5280). ``created`` is the signer's word: a time outside the certificate is
    proof that something is wrong (a key used after its certificate expired, or a clock far
    off); a time inside is what an expired key's thief would also write — the keyring's
    revocation (:func:`_check_keyring`) is what answers that."""
    created = report.manifest.get("created")
    try:
        made = ts_to_ms(str(created))
    except RecordError:
        report.problems.append(Problem("no_created", file=MANIFEST, detail={"created": created}))
        return
    ca_file = None if report.ca_given else CA_CERT   # --ca: the inspector's own file
    for what, which, where in (("signer", cert, cert_file), ("ca", ca, ca_file)):
        first, last = identity.validity_ms(which)
        report.validity[what] = (ms_to_ts(first), ms_to_ts(last))
        if not first <= made <= last:
            report.problems.append(Problem(
                f"{what}_{'not_yet_valid' if made < first else 'expired'}", file=where,
                detail={"created": created, "not_before": ms_to_ts(first),
                        "not_after": ms_to_ts(last)}))


def _check_keyring(report: BundleReport, keyring: Keyring, role: str, name: str,
                   key: Any) -> None:
    """The signer's key in the fleet's keyring, not revoked when the bundle was made (a stolen
    bus's key, revoked since, still chains to the CA). ``created`` is the signer's word: a key
    revoked later shows as a note, the summary's, not a problem."""
    report.keyring_checked = True
    entry = keyring.find(role, name, identity.key_id(key))
    if entry is None:
        report.problems.append(Problem("signer_unknown", file=f"certs/{role}.pem"))
        return
    if entry.revoked_ms is None:
        return
    report.signer_revoked = ms_to_ts(entry.revoked_ms)
    created = report.manifest.get("created")
    try:
        made = ts_to_ms(str(created))
    except RecordError:
        made = None
    if made is None or made >= entry.revoked_ms:
        report.problems.append(Problem("signer_revoked", file=f"certs/{role}.pem", detail={
            "revoked": report.signer_revoked, "created": created}))


def _sha256() -> Any:
    from cryptography.hazmat.primitives import hashes

    return hashes.SHA256()


def _check_files(report: BundleReport, members: dict[str, bytes]) -> set[str]:
    """Each listed file's hash and size; files neither listed nor signature material."""
    files = report.manifest.get("files")
    listed: set[str] = set()
    if not isinstance(files, list):
        report.problems.append(Problem("no_manifest", file=MANIFEST))
        return listed
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            report.problems.append(Problem("no_manifest", file=MANIFEST))
            continue
        name = str(entry["name"])
        listed.add(name)
        data = members.get(name)
        if data is None:
            report.problems.append(Problem("file_missing", file=name))
        elif hashlib.sha256(data).hexdigest() != entry.get("sha256") or len(data) != entry.get("bytes"):
            report.problems.append(Problem("file_changed", file=name))
    for name in members:
        if name not in listed and name not in (MANIFEST, SIGNATURE) and not (
                name.startswith("certs/") and name.endswith(".pem")):
            report.problems.append(Problem("file_added", file=name))
    return listed


def _check_records(report: BundleReport, data: bytes) -> None:
    by_agent: dict[str, dict[int, tuple[int, str, Any]]] = {}  # agent: seq: (line, hash, prev)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        report.records += 1
        rec = _object(line)
        try:
            if rec is None or canonical(rec) != line:
                raise ValueError
        except (ValueError, TypeError, KeyError, RecursionError):
            report.problems.append(Problem("not_canonical", file=RECORDS, line=number))
            continue
        if rec.get("vehicle") != report.manifest.get("vehicle"):
            report.problems.append(Problem("other_vehicle", file=RECORDS, line=number,
                                           detail={"vehicle": rec.get("vehicle")}))
        agent, seq = rec.get("agent"), rec.get("seq")
        if not isinstance(agent, str) or type(seq) is not int:
            report.unchained += 1
            continue
        seqs = by_agent.setdefault(agent, {})
        if seq in seqs:
            report.problems.append(Problem("duplicate", file=RECORDS, line=number, agent=agent,
                                           seq=seq, detail={"first_line": seqs[seq][0]}))
            continue
        seqs[seq] = (number, hashlib.sha256(line).hexdigest(), rec.get("prev"))
    if report.records != report.manifest.get("records"):
        report.problems.append(Problem("count", file=RECORDS, detail={
            "found": report.records, "manifest": report.manifest.get("records")}))
    links = _outside(report)
    for agent, seqs in sorted(by_agent.items()):
        _check_chain(report, agent, seqs, links.get(agent, {}))
    _check_ends(report, by_agent)


def _outside(report: BundleReport) -> dict[str, dict[int, tuple[int, str, Any]]]:
    """The manifest's links of seqs outside the period (collector/bundle_links.py), as chain
    nodes with line 0; a link whose record's time is inside the period is a record missing."""
    listed = report.manifest.get("outside") or []
    out: dict[str, dict[int, tuple[int, str, Any]]] = {}
    if not isinstance(listed, list):
        report.problems.append(Problem("no_manifest", file=MANIFEST))
        return out
    try:
        lo, hi = ts_to_ms(str(report.manifest.get("from"))), ts_to_ms(str(report.manifest.get("to")))
    except RecordError:
        lo, hi = 0, -1
    for entry in listed:
        if not isinstance(entry, dict):
            continue
        agent, seq, digest, ts = entry.get("agent"), entry.get("seq"), entry.get("hash"), entry.get("ts")
        if not isinstance(agent, str) or type(seq) is not int or not isinstance(digest, str):
            report.problems.append(Problem("no_manifest", file=MANIFEST))
            continue
        try:
            inside = isinstance(ts, str) and lo <= ts_to_ms(ts) < hi
        except RecordError:
            inside = False
        if inside:
            report.problems.append(Problem("missing_in_period", file=RECORDS, agent=agent,
                                           seq=seq, detail={"ts": ts}))
        out.setdefault(agent, {})[seq] = (0, digest, entry.get("prev"))
        report.outside += 1
    return out


def _check_chain(report: BundleReport, agent: str, records: dict[int, tuple[int, str, Any]],
                 outside: dict[int, tuple[int, str, Any]]) -> None:
    seqs = {**outside, **records}  # a record in the bundle wins over a link for its seq
    order = sorted(seqs)
    report.agents[agent] = (min(records), max(records))
    for before, seq in itertools.pairwise(order):
        line, _, prev = seqs[seq]
        if seq != before + 1:
            report.problems.append(Problem("gap", file=RECORDS, line=line or None, agent=agent,
                                           seq=seq,
                                           detail={"first": before + 1, "last": seq - 1}))
        elif prev is None:
            continue
        elif prev != seqs[before][1]:
            report.problems.append(Problem("broken_link", file=RECORDS, line=line or None,
                                           agent=agent, seq=seq, detail={"before": before}))
    report.chained += sum(1 for _, _, prev in records.values() if prev is not None)
    report.unchained += sum(1 for _, _, prev in records.values() if prev is None)
    first_line, _, first_prev = seqs[order[0]]
    if order[0] == 1 and first_prev not in (None, GENESIS):
        report.problems.append(Problem("broken_link", file=RECORDS, line=first_line, agent=agent,
                                       seq=1, detail={"before": 0}))


def _check_ends(report: BundleReport, by_agent: dict[str, dict[int, tuple[int, str, Any]]]) -> None:
    """Each agent's chain ends against the manifest's ``chains`` (when it has them)."""
    listed = report.manifest.get("chains")
    if listed is None:
        return
    if not isinstance(listed, list):
        report.problems.append(Problem("no_manifest", file=MANIFEST))
        return
    expected = {c.get("agent"): c for c in listed if isinstance(c, dict)}
    for agent in sorted(set(by_agent) | {a for a in expected if isinstance(a, str)}):
        seqs, chain = by_agent.get(agent), expected.get(agent)
        if seqs is None or chain is None:
            report.problems.append(Problem("chain_unlisted" if chain is None else "chain_missing",
                                           file=RECORDS, agent=agent))
            continue
        first, last = min(seqs), max(seqs)
        if first != chain.get("first_seq") or seqs[first][2] != chain.get("first_prev"):
            report.problems.append(Problem("chain_start", file=RECORDS, line=seqs[first][0],
                                           agent=agent, seq=first,
                                           detail={"manifest": chain.get("first_seq")}))
        if last != chain.get("last_seq") or seqs[last][1] != chain.get("last_hash"):
            report.problems.append(Problem("chain_end", file=RECORDS, line=seqs[last][0],
                                           agent=agent, seq=last,
                                           detail={"manifest": chain.get("last_seq")}))
        if len(seqs) != chain.get("records"):
            report.problems.append(Problem("chain_count", file=RECORDS, agent=agent, detail={
                "found": len(seqs), "manifest": chain.get("records")}))
