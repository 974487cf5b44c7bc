"""The SQLite backend of the collector's store (sqlite-utils, WAL), the embedded default."""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

import sqlite_utils

from collector.store import Store, StoreError
from collector.store_schema import MIGRATIONS
from protocols.sqlite_rows import rows_per_statement, statements

#: Rows per INSERT statement of a batch's records (issue 16, :mod:`protocols.sqlite_rows`): with
#: ``executemany`` the commit waited to take the interpreter's lock back once per row while a
#: batch was being read in the same process.
ROWS_PER_INSERT = 128


@functools.lru_cache(maxsize=64)
def _multi_row(sql: str, rows: int) -> str:
    """``sql`` (``INSERT … VALUES (?, …) <rest>``) with ``rows`` rows of placeholders."""
    head, _, tail = sql.partition(" VALUES ")
    one, _, rest = tail.partition(")")
    return f"{head} VALUES {', '.join([one + ')'] * rows)}{rest}"


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(
        path.resolve().as_uri() + "?mode=ro",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        timeout=30,
    )


class SQLiteStore(Store):
    """Records, rejects and vehicle state in one SQLite file in WAL mode."""

    upsert_vehicle_sql = (
        "INSERT INTO vehicles (vehicle, last_ts_ms, last_received_ms, agent) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (vehicle) DO UPDATE SET "
        "last_ts_ms = max(last_ts_ms, excluded.last_ts_ms), "
        "last_received_ms = max(last_received_ms, excluded.last_received_ms), "
        "agent = excluded.agent"
    )
    json_number_sql = "json_extract(record, '$.{field}')"

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        read_only: bool = False,
        synchronous: str = "full",
        rejects_max_bytes: int | None = None,
    ) -> None:
        super().__init__(rejects_max_bytes)
        self.path = Path(path)
        if (read_only or not create) and not self.path.is_file():
            raise StoreError(f"no database at {self.path}")
        if not self.path.parent.is_dir():
            # Never made: a mistyped path would put the records where nobody looks for them.
            raise StoreError(
                f"cannot open the database {self.path}: no directory "
                f"{str(self.path.parent)!r} (create it first)"
            )
        try:
            if read_only:
                # A look from another process (frota demo): no write, no migration, no lock taken.
                self._reader = _read_only(self.path)
                self.db = sqlite_utils.Database(self._reader)
            else:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=30
                )
                self.db = sqlite_utils.Database(conn)
                self.db.enable_wal()
                # FULL: a committed (and so acknowledged) batch survives a power cut of the server.
                self.db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
                self.migrate()
                # Reads (the live rules re-reading the store, /records, the CLI) go through their
                # own read-only connection and lock: in WAL a reader runs beside the writer, so a
                # long read never delays the ingest's commits, and every read sees the last commit.
                self._reader = _read_only(self.path)
            self._read_lock = threading.Lock()
            self._load_rejects_tally()
        except sqlite3.Error as err:
            raise StoreError(f"cannot open {self.path}: {err}") from err

    @property
    def location(self) -> str:
        """The database file."""
        return str(self.path)

    def migrate(self) -> list[str]:
        """Apply the migrations not applied yet; return their names."""
        applied: list[str] = []
        with self._lock:
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT)"
            )
            done = {row[0] for row in self.db.execute("SELECT name FROM migrations").fetchall()}
            for migration in MIGRATIONS:
                if migration.name in done:
                    continue
                with self._transaction() as conn:
                    for statement in migration.statements("sqlite"):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO migrations VALUES (?, ?)",
                        (migration.name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                    )
                applied.append(migration.name)
        return applied

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as err:
            raise StoreError(f"{self.path}: {err}") from err

    def _counted_inserts(self, tx: Any, sql: str,
                         batches: Sequence[Sequence[tuple[Any, ...]]]) -> list[int]:
        """Each batch's rows in statements of :data:`ROWS_PER_INSERT` rows (fewer when
        SQLite allows fewer variables in one statement), the rest in statements of 64, 32, …, 1;
        how many rows of each were new (``total_changes``: ``ON CONFLICT DO NOTHING`` counts only
        the rows inserted)."""
        conn: sqlite3.Connection = tx
        out: list[int] = []
        for rows in batches:
            if not rows:
                out.append(0)
                continue
            before = conn.total_changes
            most = rows_per_statement(conn, len(rows[0]), ROWS_PER_INSERT)
            for at, size in statements(len(rows), most):
                conn.execute(_multi_row(sql, size), list(chain.from_iterable(rows[at : at + size])))
            out.append(conn.total_changes - before)
        return out

    def _executemany(self, tx: Any, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        conn: sqlite3.Connection = tx
        before = conn.total_changes
        conn.executemany(sql, rows)
        return conn.total_changes - before

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self.db.execute(sql, params).fetchall())
        except sqlite3.Error as err:
            raise StoreError(f"{self.path}: {err}") from err

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """A read-only query on the reader connection (never waits for the writer's lock)."""
        with self._read_lock:
            try:
                return list(self._reader.execute(sql, params).fetchall())
            except sqlite3.Error as err:
                raise StoreError(f"{self.path}: {err}") from err

    def _read_pairs(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[list[Any], list[Any]]:
        """The two columns of a read-only query on the reader connection, filled row by row:
        each row's tuple is freed at its step (``fetchall`` would keep them all alive, and a
        day of samples would run the garbage collector over the whole heap)."""
        first: list[Any] = []
        second: list[Any] = []
        add_first, add_second = first.append, second.append
        with self._read_lock:
            try:
                for a, b in self._reader.execute(sql, params):
                    add_first(a)
                    add_second(b)
            except sqlite3.Error as err:
                raise StoreError(f"{self.path}: {err}") from err
        return first, second

    def close(self) -> None:
        """Close both connections."""
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self.db.conn.close()
