"""The PostgreSQL backend of the collector's store (psycopg 3): the same tables and keys as SQLite."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from collector.store import INSERT_RECORD, RECORD_COLUMNS, Store, StoreError
from collector.store_chain import INSERT_CHECKPOINT, INSERT_LINK
from collector.store_live import UPSERT_FINDING
from collector.store_schema import MIGRATIONS
from protocols.uplink import seq_ranges

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


#: The chain's inserts (hash-only entries, checkpoints) as one statement per group of batches.
_BULK: Final[dict[str, bytes]] = {
    INSERT_LINK: _unnest(INSERT_LINK, ("text", "text", "bigint", "text", "text", "text",
                                       "bigint")),
    INSERT_CHECKPOINT: _unnest(INSERT_CHECKPOINT, ("text", "text", "bigint", "text", "text",
                                                   "text", "bigint")),
    # the live rules' findings: an evaluation of a fleet upserts thousands (each open
    # driver.unidentified changes with the clock); their ids are unique in one call
    # (collector/store_live.py), as ON CONFLICT DO UPDATE needs in one statement
    UPSERT_FINDING: _unnest(UPSERT_FINDING, ("text", "text", "text", "text", "bigint", "bigint",
                                             "text", "text", "bigint")),
}

#: The records of a write go in by ONE binary COPY (psycopg formats COPY rows in C; binding them
#: as arrays formatted every value in Python, most of what the ingest spent in the store), in
#: the order given (records keep arrival order in ``id``), under a savepoint. COPY has no ON
#: CONFLICT: when a record is stored already (a resend, the same device frame under another
#: seq, twice in one group), the unique keys refuse the COPY, the savepoint undoes it alone and
#: the rows go again through this session's temporary stage and ONE ``INSERT … SELECT … ON
#: CONFLICT DO NOTHING``, which skips each such row (as every write did before).
_COLUMNS: Final = ", ".join(RECORD_COLUMNS)
_COPY_RECORDS: Final = f"COPY records ({_COLUMNS}) FROM STDIN (FORMAT BINARY)".encode()
#: The rows' binary types, in :data:`RECORD_COLUMNS` order (those of ``records``).
_RECORD_TYPES: Final = ("text", "text", "int8", "text", "int8", "text", "int8", "text", "text",
                        "text", "int8", "text", "text", "float8")
#: The stage: temporary (no WAL, no other session sees it), its columns taken from ``records``
#: (no constraint: a row the store refuses is refused by the INSERT), made when first needed
#: (the schema is then the migrated one). ``ON COMMIT DELETE ROWS``
#: empties it at every commit (a rolled-back transaction's rows are dead); a second use in
#: one transaction (a compacted day reopened before the group's records) empties it first.
_STAGE: Final = "pg_temp.frota_records_stage"
_CREATE_STAGE: Final = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS frota_records_stage ON COMMIT DELETE ROWS AS "
    f"SELECT {_COLUMNS} FROM records WITH NO DATA"
).encode()
_COPY_STAGE: Final = f"COPY {_STAGE} ({_COLUMNS}) FROM STDIN (FORMAT BINARY)".encode()
#: Moved in the order they were copied (a temporary table is read by one sequential scan, in
#: the order it was written), each skipped when either key of ``records`` holds it already (or
#: an earlier row of the same statement did); the identities inserted returned.
_MOVE_STAGE: Final = (
    f"INSERT INTO records ({_COLUMNS}) SELECT {_COLUMNS} FROM {_STAGE} ON CONFLICT DO NOTHING "
    "RETURNING vehicle, agent, seq, device_key"
).encode()


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
        #: Whether the current transaction has written records through the stage.
        self._staged = False
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
        self._staged = False  # the stage is empty at the start of every transaction
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
        if sql == INSERT_RECORD and rows:
            return self._copy_records(cur, [rows])[0]
        bulk = _BULK.get(sql)
        if bulk is not None:
            cur.execute(bulk, [list(column) for column in zip(*rows, strict=True)])
        else:
            cur.executemany(_pg(sql), rows)
        return max(cur.rowcount, 0)

    def _copy_records(self, cur: psycopg.Cursor[Any],
                      batches: Sequence[Sequence[tuple[Any, ...]]]) -> list[int]:
        """The rows of ``batches``, in order, into ``records`` (see :data:`_COPY_RECORDS`),
        each skipped when stored already; how many rows of each batch were new."""
        if cur.connection.info.transaction_status != TransactionStatus.INTRANS:
            # the savepoint and the stage (emptied at each commit) need the caller's transaction
            raise StoreError("records are written inside a transaction only")
        try:
            with cur.connection.transaction():  # a savepoint: a refused COPY undoes only itself
                self._copy(cur, _COPY_RECORDS, batches)
            return [len(batch) for batch in batches]
        except psycopg.errors.UniqueViolation:
            pass  # some row is stored already: each such row skipped, below
        if self._staged:  # this transaction used the stage already
            cur.execute(f"DELETE FROM {_STAGE}".encode())
        else:  # made by the first transaction of the session that needs it (kept once committed)
            cur.execute(_CREATE_STAGE)
        self._staged = True
        self._copy(cur, _COPY_STAGE, batches)
        cur.execute(_MOVE_STAGE)
        # counted back to their batches by both unique keys' columns, the first row holding
        # them first (the order the rows are inserted in): rows alike in all of them are
        # refused or taken alike, so the first such row is the one inserted. By identity
        # alone, a row refused by the device key was counted for a later one inserted under
        # the same seq (both answered stored, the conflict missed).
        inserted = Counter((str(v), str(a), int(s), k) for v, a, s, k in cur.fetchall())
        counts = []
        for batch in batches:
            new = 0
            for row in batch:
                key = (row[0], row[1], row[2], row[7])
                if inserted[key] > 0:
                    inserted[key] -= 1
                    new += 1
            counts.append(new)
        return counts

    @staticmethod
    def _copy(cur: psycopg.Cursor[Any], sql: bytes,
              batches: Sequence[Sequence[tuple[Any, ...]]]) -> None:
        with cur.copy(sql) as copy:
            copy.set_types(_RECORD_TYPES)
            write = copy.write_row
            for batch in batches:
                for row in batch:
                    write(row)

    def _counted_inserts(self, tx: Any, sql: str,
                         batches: Sequence[Sequence[tuple[Any, ...]]]) -> list[int]:
        """Every batch's records in ONE COPY (:meth:`_copy_records`: a group commit costs the
        same round trips whatever its size)."""
        if sql != INSERT_RECORD or not any(batches):
            return super()._counted_inserts(tx, sql, batches)
        return self._copy_records(tx, batches)

    def _received_hashes(self, wanted: Sequence[tuple[str, str, Sequence[int], bool]]
                         ) -> list[dict[int, str]]:
        """Every batch's received hashes in ONE query: each batch's seqs as runs (a batch is
        one run of consecutive seqs, as an agent numbers its records), each run one range of
        the links' key and, where asked, of the records' — a group of batches costs one round
        trip and a few array elements per batch, not five per record. Links rows come last and
        win (a seq's hash is its link's when it has one)."""
        runs = [(i, vehicle, agent, lo, hi, records)
                for i, (vehicle, agent, seqs, records) in enumerate(wanted)
                for lo, hi in seq_ranges(seqs)]
        out: list[dict[int, str]] = [{} for _ in wanted]
        if not runs:
            return out
        rows = self._query_bytes(
            b"WITH u AS (SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[], "
            b"%b::bigint[], %b::bigint[], %b::boolean[]) AS u(i, vehicle, agent, lo, hi, rec)) "
            b"SELECT u.i, 0 AS links, r.seq, r.hash FROM u JOIN records r ON u.rec AND "
            b"r.vehicle = u.vehicle AND r.agent = u.agent AND r.seq BETWEEN u.lo AND u.hi "
            b"AND r.hash IS NOT NULL UNION ALL "
            b"SELECT u.i, 1, l.seq, l.hash FROM u JOIN links l ON l.vehicle = u.vehicle AND "
            b"l.agent = u.agent AND l.seq BETWEEN u.lo AND u.hi ORDER BY links",
            [list(column) for column in zip(*runs, strict=True)])
        for i, _, seq, digest in rows:
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
