"""How captured records become the buffer's rows (numbered, chained, stored once), and rows
the records sent again.

A record's work is split in two (issue 16: the buffer's write speed):

- :func:`prepare`, before its seq is known — in the source's own thread when it hands the
  record over (``BufferWriter.put_many``), so it runs beside the writer's commits: the record's
  time in ms, its JSON as sent *without* the agent's three fields (``agent``, ``seq``,
  ``prev``), and its canonical form with ``seq`` and ``prev`` left as holes. The canonical form
  is :func:`protocols.canonical.canonical` itself, called with a placeholder ``seq`` (0) and
  ``prev`` (:data:`PLACEHOLDER`): its keys are sorted and neither value is normalized, so the
  real record's canonical bytes are these with the two values written in their place.
- :func:`build_rows`, in the committing transaction: each record gets the next ``seq``,
  ``prev`` (the chain hash of the record before it, docs/trust.md) and its own chain hash — the
  SHA-256 of the canonical bytes with the holes filled, nothing serialized again. A device
  frame already captured is left out whole (its run in ``captured_frames`` knows it,
  ``agent/frames.py``), and so is a second record of one frame with the same
  :func:`~protocols.records.device_key`.

Each thing is stored once (migration ``0008-compact-bodies``): a row holds the record's JSON as
sent *without* ``agent`` (the buffer's, in ``meta``), ``seq`` (the row's own) and ``prev``
(its own column, 32 bytes), and the columns the buffer's own queries need. :func:`sent_body`
writes the three back where they were (right after ``kind``) when the record is read to be
sent: byte for byte the JSON built whole. A record's own hash is the next record's ``prev`` (or
``meta.last_hash`` for the newest), so it is not stored with it.

A record the split does not fit (its ``vehicle``, ``ts`` or ``kind`` not a plain string, its own
``agent``, ``seq`` or ``prev`` field, no canonical form, or the placeholders not found exactly
once in it) is built whole as before (:func:`record_body`) and stored as rows were before 0008:
its whole JSON, ``prev`` NULL, its hash as 32 bytes. The split is only ever a faster road to the
same bytes (tests/agent/test_buffer_rows.py checks them against :func:`record_body`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sqlite3
from binascii import hexlify
from itertools import chain
from typing import Any, Final

import orjson

from agent.frames import FrameRuns
from protocols.canonical import canonical
from protocols.records import MAX_SAFE_INT, Record, RecordError, device_key, ts_to_ms

log = logging.getLogger("agent.buffer")

#: The ``prev`` written into a record's canonical form before its place in the chain is known:
#: 64 hex digits, as every chain hash is, so the bytes around it are the real record's.
PLACEHOLDER: Final = "0" * 64
_PREV_KEY: Final = b'"prev":"'
_SEQ_KEY: Final = b'"seq":'

#: A record prepared for the buffer: (record, its ts in ms or None, its device_seq or None, its
#: JSON as sent without agent/seq/prev or None, its canonical bytes before ``prev``'s value,
#: between ``prev``'s value and ``seq``'s, after ``seq``'s). A None JSON: built whole by
#: :func:`record_body` (``ts_ms`` None: its time is read there, raising as it always did).
Ready = tuple[Record, int | None, Any, str | None, bytes, bytes, bytes]
#: One row of ``records``: (seq, ts_ms, kind, source, device_seq, body, captured_ms, hash,
#: prev): ``prev`` set and ``hash`` None for a compact body, the other way round for a whole one.
Row = tuple[int, int, str, str, Any, str, int, bytes | None, bytes | None]


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


def _whole(rec: Record) -> Ready:
    return (rec, None, None, None, b"", b"", b"")


def prepare(rec: Record, agent: str) -> Ready:
    """What can be done for ``rec`` before its seq is known (see the module's docstring)."""
    try:
        vehicle, ts, kind = rec["vehicle"], rec["ts"], rec["kind"]
        if (type(vehicle) is not str or type(ts) is not str or type(kind) is not str
                or not (kind.isascii() and kind.isidentifier())
                or "agent" in rec or "seq" in rec or "prev" in rec):
            return _whole(rec)
        ts_ms = ts_to_ms(ts)
        # The record's own fields in the order record_body writes them; agent, seq and prev go
        # back right after kind (sent_body). vehicle and ts are strings, so the first ',"kind":'
        # in it is the key (a '"' inside a JSON string is always escaped).
        sent = orjson.dumps({"vehicle": vehicle, "ts": ts, "kind": kind, **rec}).decode()
        form = canonical({**rec, "agent": agent, "seq": 0, "prev": PLACEHOLDER})
    except (KeyError, TypeError, RecordError, orjson.JSONEncodeError):
        return _whole(rec)
    at_prev = form.find(_PREV_KEY)
    at_seq = form.find(_SEQ_KEY)
    # Each key exactly once (a nested object's "prev" or "seq" would make the place ambiguous),
    # with the placeholder values where they are expected.
    if (at_prev < 0 or at_seq < 0 or form.find(_PREV_KEY, at_prev + 1) >= 0
            or form.find(_SEQ_KEY, at_seq + 1) >= 0):
        return _whole(rec)
    prev_at = at_prev + len(_PREV_KEY)
    seq_at = at_seq + len(_SEQ_KEY)
    if (form[prev_at : prev_at + 65] != PLACEHOLDER.encode() + b'"' or seq_at < prev_at
            or form[seq_at : seq_at + 1] != b"0" or form[seq_at + 1 : seq_at + 2] not in b",}"):
        return _whole(rec)
    return (rec, ts_ms, rec.get("device_seq"), sent, form[:prev_at], form[prev_at + 64 : seq_at],
            form[seq_at + 1 :])


#: The columns of a row, in :data:`Row`'s order.
COLUMNS: Final = "seq, ts_ms, kind, source, device_seq, body, captured_ms, hash, prev"
#: Rows per INSERT statement: one statement of many rows (``VALUES (…), (…), …``) is one call
#: into SQLite where ``executemany`` is one per row — half the CPU per row, and the GIL, which
#: the sqlite3 module gives up around every call, is taken back a few times per commit instead
#: of once per row (a source thread preparing records meanwhile would hold up each row).
ROWS_PER_INSERT: Final = 200


@functools.lru_cache(maxsize=16)
def _insert_sql(rows: int) -> str:
    one = "(" + ", ".join("?" * len(COLUMNS.split(","))) + ")"
    return f"INSERT INTO records ({COLUMNS}) VALUES " + ", ".join([one] * rows)


def insert_rows(conn: sqlite3.Connection, rows: list[Row]) -> None:
    """Insert ``rows`` (in the caller's transaction), :data:`ROWS_PER_INSERT` a statement (fewer
    when SQLite allows fewer variables in one statement); the rest in statements of 128, 64,
    …, 1 rows (a few SQL texts, prepared once and cached)."""
    most = max(1, min(ROWS_PER_INSERT, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
                      // len(COLUMNS.split(","))))
    at = 0
    for size in (most, *(1 << n for n in range(7, -1, -1) if 1 << n < most)):
        while len(rows) - at >= size:
            conn.execute(_insert_sql(size), list(chain.from_iterable(rows[at : at + size])))
            at += size


def sent_body(seq: int, kind: str, body: str, prev: bytes | None, agent_json: str) -> str:
    """A stored record as it is sent: ``body`` itself when whole (``prev`` None), else with
    ``agent`` (``agent_json``: the buffer's id as JSON), ``seq`` and ``prev`` written back right
    after ``kind`` (the view ``record_bodies`` does the same in SQL)."""
    if prev is None:
        return body
    split = body.index(',"kind":') + 10 + len(kind)
    return f'{body[:split]},"agent":{agent_json},"seq":{seq},"prev":"{prev.hex()}"{body[split:]}'


def bodies_source(conn: sqlite3.Connection) -> str:
    """What to read records' bodies as sent from, with ``seq``, ``ts_ms``, ``kind`` and
    ``source``: the view ``record_bodies``, or ``records`` in a buffer from before
    0008-compact-bodies (read-only readers do not migrate it)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'record_bodies'").fetchone()
    return "records" if row is None else "record_bodies"


def agent_json(agent: str) -> str:
    """The buffer's agent id as JSON, as :func:`sent_body` writes it."""
    return orjson.dumps(agent).decode()


def hash_hex(digest: bytes | str) -> str:
    """A stored chain hash as hex: 32 bytes (since 0006-compact-rows), or hex text before."""
    return digest.hex() if isinstance(digest, bytes) else str(digest)


def _raw(digest: str) -> bytes | None:
    """A chain hash's 32 bytes, or None if it is not 64 hex digits (then built whole)."""
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    return raw if len(raw) == 32 and raw.hex() == digest else None


def build_rows(
    conn: sqlite3.Connection, agent: str, items: list[tuple[str, Ready]], seq: int, prev: str,
    now: int,
) -> tuple[list[Row], str]:
    """The rows to insert, numbered from ``seq`` and chained from ``prev``: frames already
    captured and records already given (the same :func:`device_key`) left out; the runs of
    captured frames updated (in the caller's transaction). With them the chain hash of the
    last (``prev`` when there is none)."""
    if any(ready[1] is None for _, ready in items):  # built whole: their time read here
        items = [item if item[1][1] is not None else
                 (item[0], (item[1][0], ts_to_ms(item[1][0]["ts"]), item[1][0].get("device_seq"),
                            *item[1][3:])) for item in items]
    runs = FrameRuns(conn, FrameRuns.window_of(
        (source, ready[2]) for source, ready in items if ready[2] is not None))
    rows: list[Row] = []
    frame: tuple[str, int, int] | None = None
    first: Record | None = None  # the frame's first record given a seq
    given: set[str] = set()  # the device_keys of the frame's records, once it has two
    repeat = new_frame = False
    sha256 = hashlib.sha256
    prev_raw = _raw(prev)
    prev_hex = prev.encode()
    for source, (rec, ts_ms, device_seq, sent, before, between, after) in items:
        assert ts_ms is not None  # read above
        key: str | None = None
        if device_seq is not None:
            if frame != (source, device_seq, ts_ms):
                frame = (source, device_seq, ts_ms)
                repeat = runs.known(source, device_seq, ts_ms)
                new_frame = not repeat
                first = None
                given.clear()
            if repeat:
                continue
            if first is not None:
                # A new frame has no record in the buffer yet (its run would know it): only its
                # own records can share a device_key (worked out from its second record on).
                if not given:
                    given.add(str(device_key(first, ts_ms)))
                key = str(device_key(rec, ts_ms))
                if key in given:
                    continue
        else:
            frame, repeat = None, False
        row: Row
        if sent is not None and prev_raw is not None and seq <= MAX_SAFE_INT:
            digest = sha256(b"".join((before, prev_hex, between, str(seq).encode(), after))
                            ).digest()
            row = (seq, ts_ms, rec["kind"], source, device_seq, sent, now, None, prev_raw)
        else:
            try:
                body, digest = record_body(rec, agent, seq, prev_hex.decode())
            except RecordError as err:  # no canonical form: it cannot be chained
                log.error("record dropped, it cannot be chained: %s", err)
                continue
            row = (seq, ts_ms, rec["kind"], source, device_seq, body, now, digest, None)
        if device_seq is not None:
            if first is None:
                first = rec
            elif key is not None:
                given.add(key)
            if new_frame:
                runs.note(source, device_seq, ts_ms)
                new_frame = False
        rows.append(row)
        seq += 1
        prev_raw, prev_hex = digest, hexlify(digest)
    runs.save()
    return rows, prev_hex.decode()
