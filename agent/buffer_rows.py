"""How captured records become the buffer's rows (numbered, chained, stored once), and rows
the records sent again.

A record's work is split in two (issue 16: the buffer's write speed):

- :func:`prepare`, before its seq is known — in the source's own thread when it hands the
  record over (``BufferWriter.put_many``), beside the writer's commits: the record's time in
  ms, its JSON as sent *without* the agent's three fields (``agent``, ``seq``, ``prev``), and
  the object whose canonical form is hashed, with a placeholder ``seq`` (0) and ``prev``
  (:data:`PLACEHOLDER`).
- :func:`build_rows`, in the committing transaction: the canonical forms of the commit's
  records at once (:func:`protocols.canonical_batch.forms`, the checks column by column: about
  half the CPU of :func:`protocols.canonical.canonical` record by record; a record it leaves
  goes through ``canonical``), each with the seq the record gets. Keys are sorted and ``prev``
  is not normalized, so a record's real canonical bytes are these with its ``prev`` written
  over the placeholder's. Each record gets the next ``seq``, ``prev`` (the chain hash of the
  record before it, docs/trust.md) and its own chain hash — the SHA-256 of those bytes, nothing
  serialized again. A device frame already captured is left out
  whole (its run in ``captured_frames`` knows it, ``agent/frames.py``), and so is a second
  record of one frame with the same :func:`~protocols.records.device_key`.

Each thing is stored once (migration ``0008-compact-bodies``): a row holds the record's JSON as
sent *without* ``agent`` (the buffer's, in ``meta``), ``seq`` (the row's own) and ``prev``
(its own column, 32 bytes), and the columns the buffer's own queries need. :func:`sent_body`
writes the three back where they were (right after ``kind``) when the record is read to be
sent: byte for byte the JSON built whole. A record's own hash is the next record's ``prev`` (or
``meta.last_hash`` for the newest), so it is not stored with it.

A record the split does not fit (its ``vehicle``, ``ts`` or ``kind`` not a plain string, its
``ts`` not in the canonical form — another offset or fraction, which no decoder writes —, its
own ``agent``, ``seq`` or ``prev`` field, or a nested object holding the placeholder's pair)
is built whole as before (:func:`record_body`) and stored as rows were before 0008: its whole
JSON, ``prev`` NULL, its hash as 32 bytes; so is one with no canonical form (then dropped, as
before). The split is only ever a faster road to the same bytes (tests/agent/test_buffer_rows.py
checks them against :func:`record_body`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sqlite3
from binascii import hexlify
from collections import deque
from itertools import chain, compress, islice, repeat
from operator import eq, is_not, itemgetter
from typing import Any, Final

import orjson

from agent.frames import FrameRuns
from protocols.canonical import canonical
from protocols.canonical_batch import forms
from protocols.fields import _canonical_ts_ms
from protocols.records import Record, RecordError, device_key, ts_to_ms
from protocols.sqlite_rows import rows_per_statement, statements

log = logging.getLogger("agent.buffer")

#: The ``prev`` written into a record's canonical form before its place in the chain is known:
#: 64 hex digits, as every chain hash is, so the bytes around it are the real record's.
PLACEHOLDER: Final = "0" * 64
#: ``prev`` with the placeholder, as a canonical form holds it.
_PLACEHOLDER_PAIR: Final = b'"prev":"' + PLACEHOLDER.encode() + b'"'
_PAIR_OPEN: Final = b'"prev":"'

#: A record prepared for the buffer: (record, its ts in ms or None, its device_seq or None, its
#: JSON as sent without agent/seq/prev or None, the object to hash with placeholders or None).
#: A None JSON: built whole by :func:`record_body` (``ts_ms`` None: its time is read there,
#: raising as it always did).
Ready = tuple[Record, int | None, Any, str | None, dict[str, Any] | None]
#: One row of ``records``: (seq, ts_ms, kind, source, device_seq, body, captured_ms, hash,
#: prev): ``prev`` set and ``hash`` None for a compact body, the other way round for a whole one.
Row = tuple[int, int, str, str, Any, str, int, bytes | None, bytes | None]
#: A compact row of a commit whose records are all split and flat (the usual one): (seq, ts_ms,
#: kind, source, device_seq, body, prev). Its ``captured_ms`` (the commit's, the same for every
#: row) is bound once per statement and its ``hash`` is NULL in the SQL: two of nine columns not
#: bound row by row (issue 16: binding was ≈ 1.6 µs of a record's INSERT).
CompactRow = tuple[int, int, str, str, Any, str, bytes]


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


#: The keys a record as sent starts with (record_body).
_HEAD: Final = ("vehicle", "ts", "kind")


def _whole(rec: Record) -> Ready:
    return (rec, None, None, None, None)


def prepare(rec: Record, agent: str) -> Ready:
    """What can be done for ``rec`` before its seq is known (see the module's docstring)."""
    try:
        vehicle, ts, kind = rec["vehicle"], rec["ts"], rec["kind"]
        if (type(vehicle) is not str or type(ts) is not str or type(kind) is not str
                or not (kind.isascii() and kind.isidentifier())
                or "agent" in rec or "seq" in rec or "prev" in rec):
            return _whole(rec)
        ts_ms = _canonical_ts_ms(ts)  # ts_to_ms's own first step, without its call
        if ts_ms is None:  # another offset or fraction, or not a time: built whole (rare; the
            return _whole(rec)  # decoders write canonical times), so that every split
            # record's ts is known canonical and the commit's forms need not check it again
        # The record's own fields in the order record_body writes them; agent, seq and prev go
        # back right after kind (sent_body). vehicle and ts are strings, so the first ',"kind":'
        # in it is the key (a '"' inside a JSON string is always escaped). A record whose first
        # keys are already vehicle, ts and kind (every decoder's) is written as it is: the same
        # bytes without a copy of the record in that order.
        sent = orjson.dumps(rec if tuple(islice(rec, 3)) == _HEAD else
                            {"vehicle": vehicle, "ts": ts, "kind": kind, **rec}).decode()
    except (KeyError, TypeError, RecordError, orjson.JSONEncodeError):
        return _whole(rec)
    return (rec, ts_ms, rec.get("device_seq"), sent,
            {**rec, "agent": agent, "seq": 0, "prev": PLACEHOLDER})


#: The timestamp fields :func:`prepare` has found canonical in every record it splits.
_KNOWN_TIMES: Final = frozenset({"ts"})

_first, _second, _third, _fourth, _fifth = (itemgetter(n) for n in range(5))
_kind = itemgetter("kind")
_set = dict.__setitem__


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


@functools.lru_cache(maxsize=16)
def _insert_compact_sql(rows: int) -> str:
    # numbered parameters: ?1 is the commit's captured_ms, each row's own seven follow
    values = []
    for n in range(rows):
        at = 2 + 7 * n
        own = [f"?{at + k}" for k in range(7)]
        values.append(f"({', '.join(own[:6])}, ?1, NULL, {own[6]})")
    return f"INSERT INTO records ({COLUMNS}) VALUES " + ", ".join(values)


def insert_rows(conn: sqlite3.Connection, rows: list[Row] | list[CompactRow], now: int) -> None:
    """Insert ``rows`` (in the caller's transaction), :data:`ROWS_PER_INSERT` a statement (fewer
    when SQLite allows fewer variables in one statement); the rest in statements of 128, 64,
    …, 1 rows (:mod:`protocols.sqlite_rows`). compact rows
    (:data:`CompactRow`) get ``now`` as their ``captured_ms``."""
    if not rows:
        return
    compact = len(rows[0]) == 7
    width = 7 if compact else len(COLUMNS.split(","))
    most = rows_per_statement(conn, width, ROWS_PER_INSERT, shared=1 if compact else 0)
    sql = _insert_compact_sql if compact else _insert_sql
    head = [now] if compact else []
    for at, size in statements(len(rows), most):
        conn.execute(sql(size), head + list(chain.from_iterable(rows[at : at + size])))


def sent_body(seq: int, kind: str, body: str, prev: bytes | None, agent_json: str) -> str:
    """A stored record as it is sent: ``body`` itself when whole (``prev`` None), else with
    ``agent`` (``agent_json``: the buffer's id as JSON), ``seq`` and ``prev`` written back right
    after ``kind`` (the view ``record_bodies`` does the same in SQL)."""
    if prev is None:
        return body
    # vehicle and ts are strings (prepare): the first ',"kind":"<kind>"' is the key and its value.
    head, kind_pair, rest = body.partition(f',"kind":"{kind}"')
    return f'{head}{kind_pair},"agent":{agent_json},"seq":{seq},"prev":"{prev.hex()}"{rest}'


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
) -> tuple[list[Row] | list[CompactRow], str]:
    """The rows to insert (compact, :data:`CompactRow`, when every record is split and flat),
    numbered from ``seq`` and chained from ``prev``: frames already captured and records
    already given (the same :func:`device_key`) left out; the runs of captured frames updated
    (in the caller's transaction). With them the chain hash of the last (``prev`` when there is
    none).

    Three passes: which records are new (frames and device keys); their canonical forms with
    their seqs, all at once (:func:`protocols.canonical_batch.forms`); the chain, record by
    record — each form with the previous hash written in place of :data:`PLACEHOLDER`, hashed.
    """
    if any(ready[1] is None for _, ready in items):  # built whole: their time read here
        items = [item if item[1][1] is not None else
                 (item[0], (item[1][0], ts_to_ms(item[1][0]["ts"]), item[1][0].get("device_seq"),
                            None, None)) for item in items]
    runs, kept = _frames_kept(conn, items)
    # The forms, with the seqs the records get if none is dropped (one with no canonical form).
    new = list(map(items.__getitem__, kept))
    readies: list[Ready] = list(map(_second, new))
    objs: list[Any] = list(map(_fifth, readies))
    if None not in objs:  # every record split (the usual commit): its seq set in C
        hashed = kept
        deque(map(_set, objs, repeat("seq"), range(seq, seq + len(objs))), maxlen=0)
    else:
        hashed = []
        objs = []
        for n, i in enumerate(kept):
            obj = items[i][1][4]
            if obj is not None:
                obj["seq"] = seq + n
                objs.append(obj)
                hashed.append(i)
    made = forms(objs, _KNOWN_TIMES)  # every split record's ts is canonical (prepare)
    rows: list[Row] = []
    sha256 = hashlib.sha256
    prev_raw = _raw(prev)
    prev_hex = prev.encode()
    if (prev_raw is not None and len(made) == len(kept) and None not in made
            and b"".join(made).count(_PLACEHOLDER_PAIR) == len(made)):  # type: ignore[arg-type]
        # Every record split and flat (the usual commit): its form has the seq it gets and the
        # placeholder's pair once (each has it at least once: the count over the commit says
        # none has it twice), so the chain is one tight loop.
        # Only the hashes are a loop; the rows are zipped from the columns (in C).
        chained = [prev_raw]
        append = chained.append
        pair = _PAIR_OPEN + prev_hex + b'"'
        for form in made:
            digest = sha256(form.replace(_PLACEHOLDER_PAIR, pair, 1)).digest()  # type: ignore[union-attr]
            append(digest)
            pair = _PAIR_OPEN + hexlify(digest) + b'"'
        last = chained.pop()
        compact: list[CompactRow] = list(zip(
            range(seq, seq + len(new)), map(_second, readies), map(_kind, map(_first, readies)),
            map(_first, new), map(_third, readies), map(_fourth, readies), chained, strict=True))
        runs.save()
        return compact, hexlify(last).decode()
    canonical_forms: dict[int, bytes | None] = dict(zip(hashed, made, strict=True))
    for i in kept:
        source, (rec, ts_ms, device_seq, sent, obj) = items[i]
        assert ts_ms is not None  # read above
        row: Row
        form = canonical_forms.get(i)
        if sent is not None and obj is not None and prev_raw is not None:
            if form is None or obj["seq"] != seq:  # not flat, or a record before was dropped
                obj["seq"] = seq
                try:
                    form = canonical(obj)
                except (RecordError, TypeError, ValueError):
                    form = None  # built whole below, which says why it is dropped
            if form is not None and form.count(_PLACEHOLDER_PAIR) != 1:
                form = None  # a nested object or a key ending in '"prev' holds the same
                # pair (the first one is not prev's): built whole
        else:
            form = None
        if form is not None and sent is not None:
            digest = sha256(form.replace(_PLACEHOLDER_PAIR, b'"prev":"' + prev_hex + b'"', 1)
                            ).digest()
            row = (seq, ts_ms, rec["kind"], source, device_seq, sent, now, None, prev_raw)
        else:
            try:
                body, digest = record_body(rec, agent, seq, prev_hex.decode())
            except (RecordError, TypeError, ValueError) as err:
                # no canonical form (e.g. an integer beyond 64 bits, which orjson refuses with
                # a TypeError): it cannot be chained; the commit goes on without it
                log.error("%s record dropped, it cannot be chained: %s", rec.get("kind"), err)
                continue
            row = (seq, ts_ms, rec["kind"], source, device_seq, body, now, digest, None)
        rows.append(row)
        seq += 1
        prev_raw, prev_hex = digest, hexlify(digest)
    runs.save()
    return rows, prev_hex.decode()


def _frames_kept(conn: sqlite3.Connection, items: list[tuple[str, Ready]]
                 ) -> tuple[FrameRuns, list[int]]:
    """The runs of captured frames the commit's frames can touch, and the indexes of ``items``
    to capture (:func:`_new_records`).

    The usual commit is known new column by column, without a look at each frame: when each
    source's frame numbers, in the commit's order, are consecutive integers counting up by one
    (one record a frame, none twice) and no run holds any of them, no frame can be known
    (every run's numbers are the frames captured, and none of these was), so every record is
    kept and each source's frames join the runs in one step (:meth:`FrameRuns.note_span`: the
    runs record by record would give). Otherwise, frame by frame."""
    readies = list(map(_second, items))
    numbers: list[Any] = list(map(_third, readies))
    everything = list(range(len(items)))
    framed = list(map(is_not, numbers, repeat(None)))
    if True not in framed:  # no device frame in the commit
        return FrameRuns(conn, {}), everything
    sources: list[str] = list(compress(map(_first, items), framed))
    numbers = list(compress(numbers, framed))
    times: list[int] = list(compress(map(_second, readies), framed))
    columns: dict[str, tuple[list[Any], list[int]]] = {}
    distinct = set(sources)
    if len(distinct) == 1:
        columns[sources[0]] = (numbers, times)
    else:
        for source in distinct:
            mask = list(map(eq, sources, repeat(source)))
            columns[source] = (list(compress(numbers, mask)), list(compress(times, mask)))
    runs = FrameRuns(conn, {source: (min(got), max(got)) for source, (got, _) in columns.items()})
    counting = all(set(map(type, got)) == _INT and got == list(range(got[0], got[0] + len(got)))
                   for got, _ in columns.values())
    if counting and not any(runs.overlaps(source, got[0], got[-1])
                            for source, (got, _) in columns.items()):
        for source, (got, at) in columns.items():
            runs.note_span(source, got[0], got[-1], min(at), max(at))
        return runs, everything
    return runs, _new_records(runs, items)


_INT: Final = {int}


def _new_records(runs: FrameRuns, items: list[tuple[str, Ready]]) -> list[int]:
    """The indexes of ``items`` to capture: not of a frame ``runs`` knows, nor a second record
    of one frame with the same device_key; each new frame noted in ``runs`` as it comes, so the
    same frame later in the commit (asked again, arrived twice) is known. A new frame has no
    record in the buffer yet (its run would know it): only its own records can share a
    device_key (worked out from its second record on). (A frame none of whose records can be
    chained — no canonical form, dropped with an error in build_rows — is noted all the same:
    asking for it again would give the same records.)"""
    kept: list[int] = []
    frame: tuple[str, int, int] | None = None
    first: Record | None = None  # the frame's first record kept
    given: set[str] = set()  # the device_keys of the frame's records, once it has two
    repeat = False
    for i, (source, (rec, ts_ms, device_seq, _, _)) in enumerate(items):
        if device_seq is None:
            frame, repeat = None, False
            kept.append(i)
            continue
        assert ts_ms is not None
        if frame != (source, device_seq, ts_ms):
            frame = (source, device_seq, ts_ms)
            repeat = runs.known(source, device_seq, ts_ms)
            first = None
            given.clear()
        if repeat:
            continue
        if first is None:
            first = rec
            runs.note(source, device_seq, ts_ms)
        else:
            if not given:
                given.add(str(device_key(first, ts_ms)))
            key = str(device_key(rec, ts_ms))
            if key in given:
                continue
            given.add(key)
        kept.append(i)
    return kept
