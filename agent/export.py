"""``frota agent export``: the bus's own signed bundle of its last days (issue 17 item 4;
``docs/roadside.md``), for an inspector at the roadside when the collector is out of reach.

The records come from the agent's buffer, opened read-only (``agent/buffer_summary.py``; the
running agent keeps writing, WAL). The period ends at the newest record's device time (not the
Pi's clock: it may boot in the past) and starts N days before; the bundle holds every record of
the agent's chain from the first seq whose time is in the period to the last seq, so the chain is
whole even where a catch-up gave older frames later seqs. The format is the collector's
(``protocols/bundle.py``), signed by the bus's Ed25519 key with its certificate from the fleet
CA, so ``frota verify`` checks both alike. Every export is logged: a line in ``exports.log``
beside the buffer (JSON: when, period, records, file, the bundle's SHA-256) and in the log.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from agent import hostclock
from agent.buffer import BufferError
from agent.buffer_rows import bodies_source
from agent.buffer_summary import BufferReader
from agent.config import AgentConfig
from protocols import identity
from protocols.bundle import BundleSigner, Chains, pack_to
from protocols.canonical import canonical
from protocols.records import RecordError, ms_to_ts

log = logging.getLogger(__name__)

#: The most days one export holds (as the collector's bundle, collector/web/export.py).
MAX_DAYS = 31
EXPORT_LOG = "exports.log"


class ExportError(RuntimeError):
    """The export cannot be made; the message says why (one line)."""


@dataclass(frozen=True)
class Exported:
    """What an export wrote."""

    path: Path
    records: int
    first_seq: int | None
    last_seq: int | None
    since_ms: int | None
    until_ms: int | None
    sha256: str
    signed: bool


def signer_of(config: AgentConfig) -> BundleSigner | None:
    """The bus's signing key as a bundle signer (None without ``[identity]``); the CA is
    ``identity.ca_file``, else ``ca.crt`` beside the certificate (as frota provision lays out)."""
    ident = config.identity
    if ident is None:
        return None
    ca_file = ident.ca_file or ident.cert_file.parent / "ca.crt"
    try:
        key = identity.load_signing_key(ident.key_file)
        cert = identity.load_cert_file(ident.cert_file)
        ca = identity.load_cert_file(ca_file)
        role, name = identity.certified(cert, ca)
    except (identity.IdentityError, OSError) as err:
        raise ExportError(f"identity: {err}") from None
    if role != "vehicle" or name != config.vehicle:
        raise ExportError(f"identity: the certificate is for {role} {name}, not vehicle "
                          f"{config.vehicle}")
    if identity.key_id(identity.public_key_of(cert)) != identity.key_id(key.public_key()):
        raise ExportError("identity: the key is not the one the certificate certifies")
    return BundleSigner(config.vehicle, identity.key_id(key.public_key()),
                        identity.cert_pem(cert).decode(), identity.cert_pem(ca).decode(),
                        key.sign, role="vehicle")


def _period(reader: BufferReader, days: int) -> tuple[int | None, int | None, int | None]:
    """(since, until, the first seq whose time is in the period): None, None, None for an
    empty buffer."""
    conn = reader.conn
    (newest,) = conn.execute("SELECT MAX(ts_ms) FROM records").fetchone()
    if newest is None:
        return None, None, None
    until = int(newest) + 1
    since = until - days * 86_400_000
    (first,) = conn.execute("SELECT MIN(seq) FROM records WHERE ts_ms >= ?", (since,)).fetchone()
    return since, until, int(first)


def _lines(reader: BufferReader, first: int | None, summed: Chains,
           counted: list[int]) -> Iterator[bytes]:
    """The canonical lines (with their newline) of the bodies from seq ``first`` on, read from
    the cursor one by one (never a list of millions); each counted into ``summed`` and
    ``counted[0]``."""
    if first is None:
        return
    conn = reader.conn
    cursor = conn.execute(f"SELECT body FROM {bodies_source(conn)} WHERE seq >= ? ORDER BY seq",
                          (first,))
    for (body,) in cursor:
        try:
            rec = orjson.loads(body)
            line = canonical(rec)
        except (orjson.JSONDecodeError, RecordError, TypeError, ValueError) as err:
            raise ExportError(f"a buffered record cannot be exported: {err}") from None
        summed.add(line, rec)
        counted[0] += 1
        yield line + b"\n"


def _stream(config: AgentConfig, days: int, out: BinaryIO) -> Exported:
    """The bundle of the last ``days`` days written to ``out`` as the buffer is read; what it
    holds (``path`` and ``sha256`` empty: the caller's)."""
    if not 1 <= days <= MAX_DAYS:
        raise ExportError(f"--days must be 1 to {MAX_DAYS}")
    signer = signer_of(config)
    summed, counted = Chains(), [0]
    period: tuple[int | None, int | None, int | None] = (None, None, None)
    agent_id: str | None = None

    def finish() -> dict[str, Any]:
        since, until, _ = period
        return {
            "vehicle": config.vehicle, "agent": agent_id, "made_by": "agent",
            "from": None if since is None else ms_to_ts(since),
            "to": None if until is None else ms_to_ts(until),
            "timezone": "UTC", "created": ms_to_ts(hostclock.wall_ms()), "records": counted[0],
            "findings": None, "record_schema": 1, "chains": summed.result(),
        }

    try:
        with BufferReader(config.buffer.path) as reader:
            agent_id = reader.agent()
            period = _period(reader, days)
            pack_to(out, [("records.jsonl", _lines(reader, period[2], summed, counted))], finish,
                    signer)
    except BufferError as err:
        raise ExportError(str(err)) from None
    except sqlite3.Error as err:  # mid-read: a buffer being replaced, a bad disk
        raise ExportError(f"cannot read the buffer {config.buffer.path}: {err}") from None
    seqs = [c for c in summed.result() if c["agent"] == agent_id]
    return Exported(Path(), counted[0], seqs[0]["first_seq"] if seqs else None,
                    seqs[0]["last_seq"] if seqs else None, period[0], period[1], "",
                    signer is not None)


def export(config: AgentConfig, days: int, out: Path | str) -> Exported:
    """Write the bundle of the last ``days`` days to ``out`` (a file, or a folder such as a USB
    stick's mount point: ``frota-VEHICLE-AAAA-MM-DD.zip`` in it, ``-2``, ``-3``… before
    ``.zip`` when an earlier export of that day is there); logged. ``out`` written with a
    trailing ``/`` must be a folder that exists (a stick not mounted is not a file name)."""
    check_out(out)
    if not 1 <= days <= MAX_DAYS:
        raise ExportError(f"--days must be 1 to {MAX_DAYS}")
    folder = Path(out) if Path(out).is_dir() else Path(out).parent
    # written as the buffer is read (31 days at 1 Hz are millions of records; a Pi has little
    # memory), into a temporary file beside the target, named once the bundle's day is known
    partial = folder / f".frota-{config.vehicle}-{os.getpid()}.zip.partial"
    try:
        try:
            with partial.open("wb") as f:
                made = _stream(config, days, f)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise ExportError(f"cannot write in {folder}: {err.strerror or err}") from None
        day = ms_to_ts(made.until_ms if made.until_ms is not None else hostclock.wall_ms())[:10]
        target = out_target(out, f"frota-{config.vehicle}-{day}")
        digest = _sha256_of(partial)
        _publish(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    done = replace(made, path=target, sha256=digest)
    log_export(config, done, str(target))
    return done


def _sha256_of(path: Path) -> str:
    """A file's SHA-256, read in pieces."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()


def _publish(partial: Path, target: Path) -> None:
    """Rename the synced ``partial`` to ``target`` and sync the folder."""
    try:
        partial.replace(target)
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise ExportError(f"cannot write {target}: {err.strerror or err}") from None


def bundle_bytes(config: AgentConfig, days: int) -> tuple[bytes, Exported]:
    """The bundle of the last ``days`` days as bytes (nothing written, nothing logged), and what
    it holds (``path`` empty). Only the compressed bundle is held (about 50 bytes a record), not
    the records."""
    out = io.BytesIO()
    made = _stream(config, days, out)
    data = out.getvalue()
    return data, replace(made, sha256=hashlib.sha256(data).hexdigest())


def check_out(out: Path | str) -> None:
    """ExportError for an ``--out`` written with a trailing ``/`` that is no folder (a USB
    stick not mounted): it is not a file name."""
    text = str(out)
    if text.endswith(("/", os.sep)) and not Path(out).is_dir():
        raise ExportError(f"no folder {text} (is the USB stick mounted?)")


def out_target(out: Path | str, stem: str) -> Path:
    """Where ``--out`` asks a bundle to go: the file itself, or in a folder ``stem.zip`` —
    ``stem-2.zip``, ``stem-3.zip``… when taken (:func:`check_out` first)."""
    out = Path(out)
    return _free_name(out, stem) if out.is_dir() else out


def _free_name(folder: Path, stem: str) -> Path:
    """``folder/stem.zip``, or ``stem-2.zip``, ``stem-3.zip``… when taken: a second export of
    the same day (another --days, a later hour) must not replace an earlier one on the stick."""
    target, n = folder / f"{stem}.zip", 1
    while target.exists():
        n += 1
        target = folder / f"{stem}-{n}.zip"
    return target


def _write(target: Path, data: bytes) -> None:
    """Write through a temporary file, synced, then renamed: a stick pulled out mid-write leaves
    no half bundle under the final name."""
    partial = target.with_name(target.name + ".partial")
    try:
        with partial.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        partial.unlink(missing_ok=True)
        raise ExportError(f"cannot write {target}: {err.strerror or err}") from None
    try:
        _publish(partial, target)
    except ExportError:
        partial.unlink(missing_ok=True)
        raise


def log_export(config: AgentConfig, done: Exported, to: str) -> None:
    """Log an export (``to``: the file, or who it was served to) in ``exports.log`` beside the
    buffer and in the log."""
    now = hostclock.wall_ms()
    entry = {"at": ms_to_ts(now), "vehicle": config.vehicle, "to": to,
             "from": None if done.since_ms is None else ms_to_ts(done.since_ms),
             "until": None if done.until_ms is None else ms_to_ts(done.until_ms),
             "records": done.records, "first_seq": done.first_seq, "last_seq": done.last_seq,
             "signed": done.signed, "sha256": done.sha256}
    log.info("export: %d records of %s (seq %s to %s) to %s, sha256 %s", done.records,
             config.vehicle, done.first_seq, done.last_seq, to, done.sha256)
    append_log(config, EXPORT_LOG, entry)


def append_log(config: AgentConfig, name: str, entry: dict[str, Any]) -> None:
    """One JSON line appended to the log file ``name`` beside the buffer."""
    try:
        with (config.buffer.path.parent / name).open("ab") as f:
            f.write(orjson.dumps(entry) + b"\n")
    except OSError as err:  # a read-only /var/lib/frota for this user: said, not fatal
        log.warning("cannot append to %s: %s", name, err.strerror or err)
