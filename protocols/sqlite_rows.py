"""Rows written to SQLite in multi-row statements (``INSERT … VALUES (…), (…), …``): one call into
SQLite per statement where ``executemany`` makes one per row, and the sqlite3 module gives the
interpreter's lock up and takes it back around each call. Used by the agent's buffer commits
(``agent/buffer_rows.py``) and the collector's SQLite store (``collector/store_sqlite.py``).

A batch of rows goes in statements of the most rows that fit, then the rest in statements of
powers of two below that: a few SQL texts, each prepared once and kept in the sqlite3 module's
statement cache."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator


def rows_per_statement(conn: sqlite3.Connection, width: int, wanted: int,
                       shared: int = 0) -> int:
    """How many rows of ``width`` values one statement holds: ``wanted``, or fewer when SQLite
    allows fewer variables in one statement (``shared``: variables the statement binds once,
    not per row); at least 1."""
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) - shared
    return max(1, min(wanted, limit // width))


def statements(count: int, most: int) -> Iterator[tuple[int, int]]:
    """(first row, rows) of each statement writing ``count`` rows: ``most`` a statement while
    that many are left, then the rest in powers of two below ``most``, largest first."""
    at = 0
    for size in (most, *(1 << n for n in range(most.bit_length(), -1, -1) if 1 << n < most)):
        while count - at >= size:
            yield at, size
            at += size
