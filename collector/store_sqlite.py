"""The SQLite backend of the collector's store (sqlite-utils, WAL), the embedded default."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import sqlite_utils

from collector.store import Store, StoreError


def _m001_records(db: sqlite_utils.Database) -> None:
    db.table("records").create(
        {
            "id": int,
            "vehicle": str,
            "agent": str,
            "seq": int,
            "ts": str,
            "ts_ms": int,
            "kind": str,
            "device_seq": int,
            "device_key": str,
            "raw": str,
            "record": str,
            "received_ms": int,
        },
        pk="id",
        not_null=["vehicle", "agent", "seq", "ts", "ts_ms", "kind", "record", "received_ms"],
    )
    db.table("records").create_index(["vehicle", "agent", "seq"], unique=True)
    db.table("records").create_index(["vehicle", "ts_ms", "seq"])
    # sqlite-utils' create_index has no WHERE clause: a partial index keeps records without a
    # device frame number out of it.
    db.execute(
        "CREATE UNIQUE INDEX idx_records_device ON records (vehicle, device_key) "
        "WHERE device_key IS NOT NULL"
    )


def _m002_rejects(db: sqlite_utils.Database) -> None:
    db.table("rejects").create(
        {
            "id": int,
            "received_ms": int,
            "topic": str,
            "vehicle": str,
            "agent": str,
            "first_seq": int,
            "last_seq": int,
            "reason": str,
            "payload": bytes,
        },
        pk="id",
        not_null=["received_ms", "topic", "reason", "payload"],
    )
    db.table("rejects").create_index(["vehicle", "received_ms"])


def _m003_vehicles(db: sqlite_utils.Database) -> None:
    db.table("vehicles").create(
        {"vehicle": str, "last_ts_ms": int, "last_received_ms": int, "agent": str},
        pk="vehicle",
        not_null=["last_ts_ms", "last_received_ms"],
    )


def _m004_findings(db: sqlite_utils.Database) -> None:
    # Raw SQL with IF NOT EXISTS, not sqlite-utils' create(): before this migration
    # collector/findings.py created these tables itself, with exactly this SQL, so a database
    # from then already has them (same layout; frota/demo reads them).
    db.execute(
        "CREATE TABLE IF NOT EXISTS findings (id TEXT PRIMARY KEY, rule TEXT NOT NULL, "
        "vehicle TEXT, driver TEXT, start_ms BIGINT NOT NULL, end_ms BIGINT, finding TEXT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS findings_state (name TEXT PRIMARY KEY, value BIGINT NOT NULL)"
    )


def _m005_rejects_dropped(db: sqlite_utils.Database) -> None:
    # How many payload bytes a reject had when its payload was dropped (database.rejects_max_mb).
    db.table("rejects").add_column("dropped_bytes", int, not_null_default=0)


#: Applied in order, each once, recorded by name in ``migrations``. Append, never edit.
MIGRATIONS: Final[tuple[tuple[str, Callable[[sqlite_utils.Database], None]], ...]] = (
    ("001_records", _m001_records),
    ("002_rejects", _m002_rejects),
    ("003_vehicles", _m003_vehicles),
    ("004_findings", _m004_findings),
    ("005_rejects_dropped", _m005_rejects_dropped),
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

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        synchronous: str = "full",
        rejects_max_bytes: int | None = None,
    ) -> None:
        super().__init__(rejects_max_bytes)
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise StoreError(f"no database at {self.path}")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30
            )
            self.db = sqlite_utils.Database(conn)
            self.db.enable_wal()
            # FULL: a committed (and so acknowledged) batch survives a power cut of the server.
            self.db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            self.migrate()
            # Reads (the live rules re-reading the store, /records, the CLI) go through their own
            # read-only connection and lock: in WAL a reader runs beside the writer, so a long
            # read never delays the ingest's commits, and every read sees the last commit.
            self._reader = sqlite3.connect(
                self.path.resolve().as_uri() + "?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=30,
            )
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
            for name, step in MIGRATIONS:
                if name in done:
                    continue
                with self._transaction():
                    step(self.db)
                    self.db.execute(
                        "INSERT INTO migrations VALUES (?, ?)",
                        (name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                    )
                applied.append(name)
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

    def close(self) -> None:
        """Close both connections."""
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self.db.conn.close()
