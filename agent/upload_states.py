"""The collector's answers written into the buffer: each record's upload state.

States (``agent/buffer_db.py``): pending (0), stored (1), rejected (2, with the collector's
reason and whether the cause may change), conflict (3: the collector holds another record under
this identity). Only a pending record changes state here, so an answer applied twice changes
nothing; a replay makes retryable rejects pending again. Called inside the buffer's
transactions (``agent/buffer.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agent.buffer_db import PENDING, REJECTED


def mark_answers(
    conn: sqlite3.Connection,
    stored: Sequence[tuple[int, int]],
    rejected: Sequence[tuple[int, int, str]],
    conflicts: Sequence[int],
    retryable: Sequence[bool],
    now: int,
) -> int:
    """Stored ranges, rejected ranges with reasons (each retryable or not), conflicts: the
    rows changed."""
    changed = 0
    for seq in conflicts:
        changed += conn.execute(
            "UPDATE records SET state = 3, acked_ms = ? WHERE seq = ? AND state = 0",
            (now, seq),
        ).rowcount
    for first, last in stored:
        changed += conn.execute(
            "UPDATE records SET state = 1, acked_ms = ? WHERE seq BETWEEN ? AND ? AND state = 0",
            (now, first, last),
        ).rowcount
    for i, (first, last, reason) in enumerate(rejected):
        again = int(bool(retryable[i])) if i < len(retryable) else 0
        changed += conn.execute(
            "UPDATE records SET state = 2, reason = ?, retryable = ?, acked_ms = ? "
            "WHERE seq BETWEEN ? AND ? AND state = 0",
            (reason, again, now, first, last),
        ).rowcount
    return changed


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
