"""The PostgreSQL backend of the collector's store (psycopg 3): the same tables and keys as SQLite."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import psycopg

from collector.store import INSERT_RECORD, Store, StoreError
from collector.store_chain import INSERT_LINK
from collector.store_schema import MIGRATIONS

_PLACEHOLDER = re.compile(r"\?")


def _pg(sql: str) -> bytes:
    """The shared SQL (``?`` placeholders, never inside literals here) in psycopg's style."""
    return _PLACEHOLDER.sub("%s", sql).encode()


def _unnest(sql: str, types: Sequence[str]) -> bytes:
    """``INSERT INTO t (cols) VALUES (?, …) tail`` as ONE statement for any number of rows: each
    column sent as an array (``types``: its column types, in order) and unnested server side.
    One round trip and one plan per batch instead of one per row, with the shared SQL's ``ON
    CONFLICT`` clause kept (COPY has none: a record already stored must be skipped, not fail the
    batch). The rows are inserted in the order given (records keep arrival order in ``id``)."""
    head, rest = sql.split(" VALUES (", 1)
    tail = rest.split(")", 1)[1]
    arrays = ", ".join(f"%b::{kind}[]" for kind in types)
    return f"{head} SELECT * FROM unnest({arrays}){tail}".encode()


#: The hot path's inserts (every record, hash-only chain entries) as one statement per batch.
_BULK: Final[dict[str, bytes]] = {
    INSERT_RECORD: _unnest(INSERT_RECORD, ("text", "text", "bigint", "text", "bigint", "text",
                                           "bigint", "text", "text", "text", "bigint", "text",
                                           "text")),
    INSERT_LINK: _unnest(INSERT_LINK, ("text", "text", "bigint", "text", "text", "text",
                                       "bigint")),
}


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
    json_number_sql = "(record::jsonb ->> '{field}')::numeric"
    dialect = "postgresql"

    def __init__(
        self, dsn: str, *, read_only: bool = False, rejects_max_bytes: int | None = None
    ) -> None:
        super().__init__(rejects_max_bytes)
        self.dsn = dsn
        try:
            self.conn = psycopg.connect(dsn, autocommit=True)
            if read_only:  # a look from another process: no migration, every write refused
                self.conn.execute("SET default_transaction_read_only = on")
            else:
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
            for migration in MIGRATIONS:
                if migration.name in done:
                    continue
                for statement in migration.statements("postgresql"):
                    self.conn.execute(statement.encode())
                self.conn.execute("INSERT INTO migrations (name) VALUES (%s)", (migration.name,))
                applied.append(migration.name)
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
        if len(rows) == 1:  # one round trip (executemany enters and leaves pipeline mode)
            cur.execute(_pg(sql), rows[0])
            return max(cur.rowcount, 0)
        bulk = _BULK.get(sql)
        if bulk is not None:
            cur.execute(bulk, [list(column) for column in zip(*rows, strict=True)])
        else:
            cur.executemany(_pg(sql), rows)
        return max(cur.rowcount, 0)

    def _counted_inserts(self, tx: Any, sql: str,
                         batches: Sequence[Sequence[tuple[Any, ...]]]) -> list[int]:
        """Every batch's rows in ONE unnest statement (a group commit costs one round trip per
        kind of row, not one per batch); the identities it inserted (RETURNING) are counted
        back to their batches, the first batch holding an identity first (the order rows are
        inserted in)."""
        bulk = _BULK.get(sql)
        rows = [row for batch in batches for row in batch]
        if bulk is None or not rows:
            return super()._counted_inserts(tx, sql, batches)
        cur: psycopg.Cursor[Any] = tx
        cur.execute(bulk + b" RETURNING vehicle, agent, seq",
                    [list(column) for column in zip(*rows, strict=True)])
        inserted = Counter((str(v), str(a), int(s)) for v, a, s in cur.fetchall())
        counts = []
        for batch in batches:
            new = 0
            for row in batch:
                key = (row[0], row[1], row[2])
                if inserted[key] > 0:
                    inserted[key] -= 1
                    new += 1
            counts.append(new)
        return counts

    def _received_hashes(self, wanted: Sequence[tuple[str, str, Sequence[int], bool]]
                         ) -> list[dict[int, str]]:
        """Every batch's received hashes in ONE query (identities unnested and joined to the
        links and, where asked, the records): a group of batches costs one round trip, not
        one per batch."""
        keys = [(i, vehicle, agent, seq, records)
                for i, (vehicle, agent, seqs, records) in enumerate(wanted) for seq in seqs]
        out: list[dict[int, str]] = [{} for _ in wanted]
        if not keys:
            return out
        rows = self._query_bytes(
            b"SELECT u.i, u.seq, coalesce(l.hash, r.hash) FROM unnest(%b::bigint[], %b::text[], "
            b"%b::text[], %b::bigint[], %b::boolean[]) AS u(i, vehicle, agent, seq, rec) "
            b"LEFT JOIN links l ON l.vehicle = u.vehicle AND l.agent = u.agent AND l.seq = u.seq "
            b"LEFT JOIN records r ON u.rec AND r.vehicle = u.vehicle AND r.agent = u.agent "
            b"AND r.seq = u.seq WHERE coalesce(l.hash, r.hash) IS NOT NULL",
            [list(column) for column in zip(*keys, strict=True)])
        for i, seq, digest in rows:
            out[int(i)][int(seq)] = str(digest)
        return out

    def _query_bytes(self, sql: bytes, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return list(self.conn.execute(sql, params).fetchall())
        except psycopg.Error as err:
            raise StoreError(f"{self.location}: {err}".splitlines()[0]) from err

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self.conn.execute(_pg(sql), params).fetchall())
        except psycopg.Error as err:
            raise StoreError(f"{self.location}: {err}".splitlines()[0]) from err

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self.conn.close()
