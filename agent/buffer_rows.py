"""How captured records become the buffer's rows: numbered, chained, stored once.

A commit's records are turned into rows here, in memory, before one ``executemany``: each gets
the next ``seq``, ``prev`` (the chain hash of the record before it, docs/trust.md) and its own
chain hash; a device frame already captured is left out whole (its run in ``captured_frames``
knows it, ``agent/frames.py``), and so is a second record of one frame with the same
:func:`~protocols.records.device_key`. A row holds the record's JSON once, as it is sent, with
the columns the buffer's own queries need; the hash is kept as its 32 bytes.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from typing import Any

import orjson

from agent.frames import FrameRuns
from protocols.canonical import canonical
from protocols.records import Record, RecordError, device_key

log = logging.getLogger("agent.buffer")

#: One record to capture: (source, record, its ts in ms, its device_seq or None).
Timed = tuple[str, Record, int, Any]
#: One row of ``records``: (seq, ts_ms, kind, source, device_seq, body, captured_ms, hash).
Row = tuple[int, int, str, str, Any, str, int, bytes]


def record_body(rec: Record, agent: str, seq: int, prev: str) -> tuple[str, bytes]:
    """The record as stored and sent — common fields first, then agent, seq and ``prev`` (the
    chain hash of the record before it), then the rest — and its own chain hash (32 bytes: the
    SHA-256 of its canonical form, :func:`protocols.chain.record_hash` in binary)."""
    out: dict[str, Any] = {"vehicle": rec["vehicle"], "ts": rec["ts"], "kind": rec["kind"]}
    out["agent"] = agent
    out["seq"] = seq
    out["prev"] = prev
    for key, value in rec.items():
        if key not in out:
            out[key] = value
    # orjson: the same compact UTF-8 JSON as records.dumps, several times faster on the Pi.
    return orjson.dumps(out).decode(), hashlib.sha256(canonical(out)).digest()


def hash_hex(digest: bytes | str) -> str:
    """A stored chain hash as hex: 32 bytes (since 0006-compact-rows), or hex text before."""
    return digest.hex() if isinstance(digest, bytes) else str(digest)


def build_rows(
    conn: sqlite3.Connection, agent: str, timed: list[Timed], seq: int, prev: str, now: int
) -> list[Row]:
    """The rows to insert, numbered from ``seq`` and chained from ``prev``: frames already
    captured and records already given (the same :func:`device_key`) left out; the runs of
    captured frames updated (in the caller's transaction)."""
    runs = FrameRuns(conn, FrameRuns.window_of(
        (source, device_seq) for source, _, _, device_seq in timed if device_seq is not None))
    rows: list[Row] = []
    given: set[tuple[str, str]] = set()  # (source, device_key) of this frame's records
    frame: tuple[str, int, int] | None = None
    repeat = new_frame = False
    for source, rec, ts_ms, device_seq in timed:
        if device_seq is None:
            frame, repeat = None, False
        elif frame != (source, device_seq, ts_ms):
            frame = (source, device_seq, ts_ms)
            repeat = runs.known(source, device_seq, ts_ms)
            new_frame = not repeat
            given.clear()
        if repeat:
            continue
        key: tuple[str, str] | None = None
        if device_seq is not None:
            # A new frame has no record in the buffer yet (its run would know it): only its
            # own records can share a device_key.
            key = (source, str(device_key(rec, ts_ms)))
            if key in given:
                continue
        try:
            body, digest = record_body(rec, agent, seq, prev)
        except RecordError as err:  # no canonical form: it cannot be chained
            log.error("record dropped, it cannot be chained: %s", err)
            continue
        if device_seq is not None and key is not None:
            given.add(key)
            if new_frame:
                runs.note(source, device_seq, ts_ms)
                new_frame = False
        rows.append((seq, ts_ms, rec["kind"], source, device_seq, body, now, digest))
        seq += 1
        prev = digest.hex()
    runs.save()
    return rows
