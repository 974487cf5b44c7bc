"""How captured records become the buffer's rows: numbered, chained, stored once.

A commit's records are turned into rows here, in memory, before one ``executemany``: each gets
the next ``seq``, ``prev`` (the chain hash of the record before it, docs/trust.md) and its own
chain hash; a device frame already captured is left out whole (its run in ``captured_frames``
knows it, ``agent/frames.py``), and so is a second record of one frame with the same
:func:`~protocols.records.device_key`. A row holds the record's JSON once, as it is sent, with
the columns the buffer's own queries need; the hash is kept as its 32 bytes.
"""

from __future__ import annotations

import logging
import sqlite3
from hashlib import sha256
from typing import Any

import orjson

from agent.frames import FrameRuns
from protocols.canonical import canonical
from protocols.canonical_batch import OPTIONS, ready
from protocols.records import Record, RecordError, device_key

log = logging.getLogger("agent.buffer")

#: One record to capture: (source, record, its ts in ms, its device_seq or None).
Timed = tuple[str, Record, int, Any]
#: One row of ``records``: (seq, ts_ms, kind, source, device_seq, body, captured_ms, hash).
Row = tuple[int, int, str, str, Any, str, int, bytes]


#: The fields the agent sets itself: a record that already carries one (none of the decoders'
#: do) is copied key by key, where the agent's value wins as it always did.
_AGENT_FIELDS = frozenset({"agent", "seq", "prev"})


def sent_form(rec: Record, agent: str, seq: int, prev: str) -> dict[str, Any]:
    """The record as stored and sent: common fields first, then agent, seq and ``prev`` (the
    chain hash of the record before it), then the rest."""
    out: dict[str, Any] = {"vehicle": rec["vehicle"], "ts": rec["ts"], "kind": rec["kind"],
                           "agent": agent, "seq": seq, "prev": prev}
    if _AGENT_FIELDS.isdisjoint(rec):
        out.update(rec)  # vehicle, ts and kind keep their place (and their same values)
    else:
        for key, value in rec.items():
            if key not in out:
                out[key] = value
    return out


def hash_hex(digest: bytes | str) -> str:
    """A stored chain hash as hex: 32 bytes (since 0006-compact-rows), or hex text before."""
    return digest.hex() if isinstance(digest, bytes) else str(digest)


def _chainable(outs: list[dict[str, Any]]) -> tuple[list[dict[str, Any] | None], list[bool]]:
    """Each record's canonical form made ready in one batch (protocols/canonical_batch.py), and
    whether it has one at all (one the batch leaves to canonical() is asked there)."""
    readies = ready(outs)
    ok = [True] * len(outs)
    for i, prepared in enumerate(readies):
        if prepared is None:
            try:
                canonical(outs[i])
            except RecordError as err:
                log.error("record dropped, it cannot be chained: %s", err)
                ok[i] = False
    return readies, ok


def build_rows(
    conn: sqlite3.Connection, agent: str, timed: list[Timed], seq: int, prev: str, now: int
) -> list[Row]:
    """The rows to insert, numbered from ``seq`` and chained from ``prev``: frames already
    captured and records already given (the same :func:`device_key`) left out; the runs of
    captured frames updated (in the caller's transaction).

    In three passes, so that the per-record work left is the chain itself: the records' sent
    forms, checked for a canonical form all at once; the frames and duplicates left out and the
    seqs given; then, record by record, ``prev``, the JSON and the hash."""
    runs = FrameRuns(conn, FrameRuns.window_of(
        (source, device_seq) for source, _, _, device_seq in timed if device_seq is not None))
    outs = [sent_form(rec, agent, 0, prev) for _, rec, _, _ in timed]
    readies, chainable = _chainable(outs)
    kept: list[int] = []  # indexes into timed, in order
    given: set[tuple[str, str]] = set()  # (source, device_key) of this frame's records
    frame: tuple[str, int, int] | None = None
    repeat = new_frame = False
    for i, (source, rec, ts_ms, device_seq) in enumerate(timed):
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
        if not chainable[i]:  # no canonical form: it cannot be chained
            continue
        if device_seq is not None and key is not None:
            given.add(key)
            if new_frame:
                runs.note(source, device_seq, ts_ms)
                new_frame = False
        kept.append(i)
    runs.save()
    rows: list[Row] = []
    dumps = orjson.dumps
    for i in kept:
        out, prepared = outs[i], readies[i]
        out["seq"] = seq
        out["prev"] = prev
        if prepared is None:
            form = canonical(out)
        else:
            if prepared is not out:  # a copy with its doubles normalized
                prepared["seq"] = seq
                prepared["prev"] = prev
            try:
                form = dumps(prepared, option=OPTIONS)
            except orjson.JSONEncodeError:  # an integer beyond ±(2**53 - 1): canonical() says
                form = canonical(out)
        digest = sha256(form).digest()
        source, rec, ts_ms, device_seq = timed[i]
        rows.append((seq, ts_ms, rec["kind"], source, device_seq, dumps(out).decode(), now,
                     digest))
        seq += 1
        prev = digest.hex()
    return rows
