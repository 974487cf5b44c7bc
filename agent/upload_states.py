"""The collector's answers written into the buffer: each record's upload state.

States (``agent/buffer_db.py``): pending (0), stored (1), rejected (2, with the collector's
reason and whether the cause may change), conflict (3: the collector holds another record under
this identity). Only a pending record changes state here, so an answer applied twice changes
nothing; a replay makes retryable rejects pending again. Called inside the buffer's
transactions (``agent/buffer.py``).

Since migration ``0007-stored-ranges`` *stored* is not written into the records: the seqs the
collector stored are kept as ranges (``stored_ranges``: first, last, when), merged as they
touch, so an acknowledgement of a 1,000-record batch is one small row written, not 1,000 rows
rewritten (issue 16: that update was 90 % of the drain). A record's state is then:

- its ``state`` column when it is 2 or 3 (rejected, conflict: rare, written per record);
- stored (1) when a stored range holds its seq (rows stored before 0007 keep ``state = 1`` and
  the migration made their ranges);
- pending (0) otherwise.

Every seq given and held by no range is a record in the buffer: only stored records are
deleted (retention, a full disk), so a gap between the ranges is counted by its seqs, less the
rejected records and conflicts in it (their partial index), never by walking the records.
A range never holds a rejected record or a conflict (a stored range is cut around them when it
is written, a rejection only touches seqs no range holds), so a replay (rejected → pending)
never makes a record stored by mistake. The view ``record_states`` (seq, state) gives every
record's state in SQL (``sqlite3 buffer.sqlite``, the tests).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Final

from agent.buffer_db import CONFLICT, MAX_REPLAY_SEQ, PENDING, REJECTED
from agent.buffer_rows import sent_body

#: SQL: the seq ``{seq}`` is held by a stored range (ranges never overlap: the one that starts
#: last at or before it is the only one that can hold it).
HELD: Final = ("(SELECT s.last FROM stored_ranges s WHERE s.first <= {seq} "
               "ORDER BY s.first DESC LIMIT 1) >= {seq}")

Span = tuple[int, int]


def stored_spans(conn: sqlite3.Connection, low: int, high: int) -> list[Span]:
    """The stored ranges reaching into ``low``…``high``, in order."""
    rows = conn.execute(
        "SELECT first, last FROM stored_ranges WHERE last >= ? AND first <= ? ORDER BY last",
        (low, high),
    ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


def gaps(conn: sqlite3.Connection, low: int, high: int) -> list[Span]:
    """The parts of ``low``…``high`` no stored range holds, in order."""
    out: list[Span] = []
    at = low
    for first, last in stored_spans(conn, low, high):
        if first > at:
            out.append((at, first - 1))
        at = max(at, last + 1)
    if at <= high:
        out.append((at, high))
    return out


def is_stored(conn: sqlite3.Connection, seq: int) -> bool:
    """True when a stored range holds ``seq``."""
    row = conn.execute(
        "SELECT last FROM stored_ranges WHERE first <= ? ORDER BY first DESC LIMIT 1", (seq,)
    ).fetchone()
    return row is not None and int(row[0]) >= seq


def pending_rows(
    conn: sqlite3.Connection, after: int, limit: int, upto: int | None, agent_json: str
) -> list[tuple[int, str]]:
    """Pending records with ``after < seq [<= upto]``, oldest first: (seq, JSON body as sent;
    ``agent_json``: the buffer's agent id as JSON, :func:`agent.buffer_rows.sent_body`)."""
    out: list[tuple[int, str]] = []
    for first, last in gaps(conn, after + 1, MAX_REPLAY_SEQ if upto is None else upto):
        out.extend(
            (s, sent_body(s, k, b, p, agent_json)) for s, k, b, p in conn.execute(
                "SELECT seq, kind, body, prev FROM records WHERE seq BETWEEN ? AND ? "
                "AND state = 0 ORDER BY seq LIMIT ?", (first, last, limit - len(out)))
        )
        if len(out) >= limit:
            break
    return out


def last_given(conn: sqlite3.Connection) -> int:
    """The last seq given (0 before the first record)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
    return 0 if row is None else int(row[0])


def _answered_in(conn: sqlite3.Connection, first: int, last: int) -> int:
    """How many rejected records and conflicts have ``first <= seq <= last``."""
    (count,) = conn.execute(
        "SELECT COUNT(*) FROM records INDEXED BY records_answered "
        "WHERE state >= 2 AND seq BETWEEN ? AND ?", (first, last)
    ).fetchone()
    return int(count)


def pending_between(conn: sqlite3.Connection, first: int, last: int) -> int:
    """How many records with ``first <= seq <= last`` are pending: the seqs given that no
    range holds, less the rejected records and conflicts among them."""
    total = 0
    for a, b in gaps(conn, max(first, 1), min(last, last_given(conn))):
        total += b - a + 1 - _answered_in(conn, a, b)
    return total


def not_stored(conn: sqlite3.Connection, seqs: Iterable[int]) -> set[int]:
    """Those of ``seqs`` no stored range holds."""
    wanted = sorted(set(seqs))
    if not wanted:
        return set()
    spans = stored_spans(conn, wanted[0], wanted[-1])
    out: set[int] = set()
    i = 0
    for seq in wanted:
        while i < len(spans) and spans[i][1] < seq:
            i += 1
        if i == len(spans) or seq < spans[i][0]:
            out.add(seq)
    return out


def count_states(conn: sqlite3.Connection) -> dict[int, int]:
    """How many records the buffer holds in each upload state."""
    answered = dict(conn.execute(
        "SELECT state, COUNT(*) FROM records WHERE state >= 2 GROUP BY state").fetchall())
    (total,) = conn.execute("SELECT COUNT(*) FROM records").fetchone()
    pending = pending_between(conn, 1, MAX_REPLAY_SEQ)
    rejected = int(answered.get(REJECTED, 0))
    conflicts = int(answered.get(CONFLICT, 0))
    return {PENDING: pending, 1: int(total) - pending - rejected - conflicts,
            REJECTED: rejected, CONFLICT: conflicts}


def _store(conn: sqlite3.Connection, first: int, last: int, now: int) -> int:
    """Write ``first``…``last`` as stored: the parts no range holds yet, cut around rejected
    records and conflicts, merged with the ranges they touch; how many pending records that
    made stored."""
    changed = 0
    # Never a seq not given yet.
    for a, b in gaps(conn, max(first, 1), min(last, last_given(conn))):
        answered = [int(s) for (s,) in conn.execute(
            "SELECT seq FROM records INDEXED BY records_answered "
            "WHERE state >= 2 AND seq BETWEEN ? AND ? ORDER BY seq", (a, b))]
        changed += b - a + 1 - len(answered)
        for lo, hi in _cut(a, b, answered):
            _merge(conn, lo, hi, now)
    return changed


def _cut(first: int, last: int, holes: Sequence[int]) -> list[Span]:
    """``first``…``last`` less the seqs ``holes`` (sorted, inside it)."""
    out: list[Span] = []
    at = first
    for hole in holes:
        if hole > at:
            out.append((at, hole - 1))
        at = hole + 1
    if at <= last:
        out.append((at, last))
    return out


def _merge(conn: sqlite3.Connection, first: int, last: int, now: int) -> None:
    """Add the range ``first``…``last`` (held by no range), merged with those right before and
    right after it."""
    before = conn.execute(
        "SELECT first FROM stored_ranges WHERE last = ?", (first - 1,)).fetchone()
    after = conn.execute(
        "SELECT last FROM stored_ranges WHERE first = ?", (last + 1,)).fetchone()
    if after is not None:
        conn.execute("DELETE FROM stored_ranges WHERE first = ?", (last + 1,))
        last = int(after[0])
    if before is not None:
        conn.execute("UPDATE stored_ranges SET last = ?, acked_ms = ? WHERE first = ?",
                     (last, now, before[0]))
    else:
        conn.execute("INSERT INTO stored_ranges (first, last, acked_ms) VALUES (?, ?, ?)",
                     (first, last, now))


def mark_answers(
    conn: sqlite3.Connection,
    stored: Sequence[tuple[int, int]],
    rejected: Sequence[tuple[int, int, str]],
    conflicts: Sequence[int],
    retryable: Sequence[bool],
    now: int,
) -> int:
    """Stored ranges, rejected ranges with reasons (each retryable or not), conflicts: the
    records whose state changed."""
    changed = 0
    for seq in conflicts:
        if not is_stored(conn, seq):
            changed += conn.execute(
                "UPDATE records SET state = 3, acked_ms = ? WHERE seq = ? AND state = 0",
                (now, seq),
            ).rowcount
    for first, last in stored:
        changed += _store(conn, first, last, now)
    for i, (first, last, reason) in enumerate(rejected):
        again = int(bool(retryable[i])) if i < len(retryable) else 0
        for a, b in gaps(conn, first, last):
            changed += conn.execute(
                "UPDATE records SET state = 2, reason = ?, retryable = ?, acked_ms = ? "
                "WHERE seq BETWEEN ? AND ? AND state = 0",
                (reason, again, now, a, b),
            ).rowcount
    return changed


def stored_first(conn: sqlite3.Connection, limit: int) -> list[int]:
    """The seqs of up to ``limit`` of the oldest stored records."""
    (low,) = conn.execute("SELECT MIN(seq) FROM records").fetchone()
    out: list[int] = []
    if low is None:
        return out
    for first, last in stored_spans(conn, int(low), MAX_REPLAY_SEQ):
        out.extend(int(s) for (s,) in conn.execute(
            "SELECT seq FROM records WHERE seq BETWEEN ? AND ? AND state < 2 ORDER BY seq "
            "LIMIT ?", (first, last, limit - len(out))))
        if len(out) >= limit:
            break
    return out


def replay(conn: sqlite3.Connection, first: int, last: int) -> int:
    """The retryable rejects with first <= seq <= last made pending again, ``replay_gen``
    counted up when any: how many."""
    changed = int(conn.execute(
        "UPDATE records SET state = ?, reason = NULL, retryable = 0, acked_ms = NULL "
        "WHERE state = ? AND retryable = 1 AND seq BETWEEN ? AND ?",
        (PENDING, REJECTED, first, last),
    ).rowcount)
    if changed:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('replay_gen', '1') ON CONFLICT (key) "
            "DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)")
    return changed
