"""The PostgreSQL backend of the collector's store (psycopg 3): the same tables and keys as SQLite."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import psycopg

from collector.store import Store, StoreError

#: Applied in order, each once, recorded by name in ``migrations``. Append, never edit.
MIGRATIONS: Final[tuple[tuple[str, str], ...]] = (
    (
        "001_records",
        """
        CREATE TABLE records (
            id BIGSERIAL PRIMARY KEY,
            vehicle TEXT NOT NULL,
            agent TEXT NOT NULL,
            seq BIGINT NOT NULL,
            ts TEXT NOT NULL,
            ts_ms BIGINT NOT NULL,
            kind TEXT NOT NULL,
            device_seq BIGINT,
            device_key TEXT,
            raw TEXT,
            record TEXT NOT NULL,
            received_ms BIGINT NOT NULL
        );
        CREATE UNIQUE INDEX idx_records_vehicle_agent_seq ON records (vehicle, agent, seq);
        CREATE INDEX idx_records_vehicle_ts_ms_seq ON records (vehicle, ts_ms, seq);
        CREATE UNIQUE INDEX idx_records_device ON records (vehicle, device_key)
            WHERE device_key IS NOT NULL;
        """,
    ),
    (
        "002_rejects",
        """
        CREATE TABLE rejects (
            id BIGSERIAL PRIMARY KEY,
            received_ms BIGINT NOT NULL,
            topic TEXT NOT NULL,
            vehicle TEXT,
            agent TEXT,
            first_seq BIGINT,
            last_seq BIGINT,
            reason TEXT NOT NULL,
            payload BYTEA NOT NULL
        );
        CREATE INDEX idx_rejects_vehicle_received_ms ON rejects (vehicle, received_ms);
        """,
    ),
    (
        "003_vehicles",
        """
        CREATE TABLE vehicles (
            vehicle TEXT PRIMARY KEY,
            last_ts_ms BIGINT NOT NULL,
            last_received_ms BIGINT NOT NULL,
            agent TEXT
        );
        """,
    ),
    (
        # IF NOT EXISTS: before this migration collector/findings.py created these tables itself,
        # with exactly this layout, so a database from then already has them.
        "004_findings",
        """
        CREATE TABLE IF NOT EXISTS findings (
            id TEXT PRIMARY KEY,
            rule TEXT NOT NULL,
            vehicle TEXT,
            driver TEXT,
            start_ms BIGINT NOT NULL,
            end_ms BIGINT,
            finding TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS findings_state (
            name TEXT PRIMARY KEY,
            value BIGINT NOT NULL
        );
        """,
    ),
    (
        # How many payload bytes a reject had when its payload was dropped (rejects_max_mb).
        "005_rejects_dropped",
        "ALTER TABLE rejects ADD COLUMN dropped_bytes BIGINT NOT NULL DEFAULT 0;",
    ),
)

_PLACEHOLDER = re.compile(r"\?")


def _pg(sql: str) -> bytes:
    """The shared SQL (``?`` placeholders, never inside literals here) in psycopg's style."""
    return _PLACEHOLDER.sub("%s", sql).encode()


def _redact(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresStore(Store):
    """Records, rejects and vehicle state in a PostgreSQL database."""

    upsert_vehicle_sql = (
        "INSERT INTO vehicles (vehicle, last_ts_ms, last_received_ms, agent) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (vehicle) DO UPDATE SET "
        "last_ts_ms = greatest(vehicles.last_ts_ms, excluded.last_ts_ms), "
        "last_received_ms = greatest(vehicles.last_received_ms, excluded.last_received_ms), "
        "agent = excluded.agent"
    )

    def __init__(self, dsn: str, *, rejects_max_bytes: int | None = None) -> None:
        super().__init__(rejects_max_bytes)
        self.dsn = dsn
        try:
            self.conn = psycopg.connect(dsn, autocommit=True)
            self.migrate()
            self._load_rejects_tally()
        except psycopg.Error as err:
            raise StoreError(f"cannot open {_redact(dsn)}: {err}".splitlines()[0]) from err

    @property
    def location(self) -> str:
        """The DSN without its password."""
        return _redact(self.dsn)

    def migrate(self) -> list[str]:
        """Apply the migrations not applied yet; return their names."""
        applied: list[str] = []
        with self._lock, self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(4242)")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at "
                "TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in self.conn.execute("SELECT name FROM migrations")}
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                self.conn.execute(sql.encode())
                self.conn.execute("INSERT INTO migrations (name) VALUES (%s)", (name,))
                applied.append(name)
        return applied

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                yield cur
        except psycopg.Error as err:
            raise StoreError(f"{self.location}: {err}".splitlines()[0]) from err

    def _executemany(self, tx: Any, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        cur: psycopg.Cursor[Any] = tx
        cur.executemany(_pg(sql), rows)
        return max(cur.rowcount, 0)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self.conn.execute(_pg(sql), params).fetchall())
        except psycopg.Error as err:
            raise StoreError(f"{self.location}: {err}".splitlines()[0]) from err

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self.conn.close()
