"""The buffer's schema: named migrations, applied in order once each (the ``migrations`` table)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Final

from agent import hostclock

#: Named migrations, applied in order once each. Append; never edit one that has shipped.
MIGRATIONS: Final[tuple[tuple[str, str], ...]] = (
    (
        "0001-records",
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE records (
            seq INTEGER PRIMARY KEY,          -- 1, 2, 3, ... assigned in the commit
            ts_ms INTEGER NOT NULL,           -- the record's ts, for retention and ordering
            kind TEXT NOT NULL,
            source TEXT NOT NULL,             -- the configured device name, or 'agent'
            device_seq INTEGER,               -- the device's own frame number (registrador)
            device_key TEXT,                  -- one record of one frame: see device_key()
            body TEXT NOT NULL,               -- the canonical record as JSON, agent and seq included
            state INTEGER NOT NULL DEFAULT 0, -- 0 pending, 1 stored, 2 rejected
            reason TEXT,                      -- the collector's reason for a rejection
            captured_ms INTEGER NOT NULL,     -- host wall clock at commit (diagnostics only)
            acked_ms INTEGER                  -- host wall clock at the collector's answer
        );
        CREATE UNIQUE INDEX records_device_key
            ON records (source, device_key) WHERE device_key IS NOT NULL;
        CREATE INDEX records_device_seq ON records (source, device_seq) WHERE device_seq IS NOT NULL;
        CREATE INDEX records_pending ON records (seq) WHERE state = 0;
        CREATE INDEX records_ts ON records (ts_ms);
        """,
    ),
    (
        # The last seq given, kept apart from the records: retention may delete every record,
        # and the numbering must go on (the collector knows the old numbers).
        "0002-last-seq",
        """
        INSERT OR REPLACE INTO meta (key, value)
            SELECT 'last_seq', CAST(COALESCE(MAX(seq), 0) AS TEXT) FROM records;
        """,
    ),
    (
        # frota agent status: each device's latest health record without a full scan (device
        # records are few; the index costs nothing on the others).
        "0003-device-records",
        """
        CREATE INDEX records_device_kind ON records (seq) WHERE kind = 'device';
        """,
    ),
    (
        # Chained records (docs/trust.md): each record's chain hash, kept to bind the collector's
        # acknowledgements to content and to sign checkpoints; whether a rejection is retryable.
        # State 3 is a conflict: the collector holds another record under this identity.
        "0004-chain",
        """
        ALTER TABLE records ADD COLUMN hash TEXT;
        ALTER TABLE records ADD COLUMN retryable INTEGER NOT NULL DEFAULT 0
        """,
    ),
    (
        # The device frames captured, as ranges of frame numbers (and the device times they
        # span): kept when their records are evicted or expire, so a frame asked again after
        # its records left the buffer is still known and never captured twice (issue 11).
        # Filled from the records already there.
        "0005-captured-frames",
        """
        CREATE TABLE captured_frames (
            source TEXT NOT NULL,
            first INTEGER NOT NULL,           -- first frame number of the run
            last INTEGER NOT NULL,            -- last frame number of the run
            first_ms INTEGER NOT NULL,        -- the earliest device time among them
            last_ms INTEGER NOT NULL,         -- the latest device time among them
            PRIMARY KEY (source, first)
        );
        CREATE INDEX captured_frames_last ON captured_frames (source, last);
        INSERT INTO captured_frames (source, first, last, first_ms, last_ms)
            SELECT source, MIN(device_seq), MAX(device_seq), MIN(ts_ms), MAX(ts_ms) FROM (
                SELECT source, device_seq, ts_ms,
                       device_seq - DENSE_RANK() OVER (
                           PARTITION BY source ORDER BY device_seq) AS run
                FROM records WHERE device_seq IS NOT NULL)
            GROUP BY source, run;
        """,
    ),
    (
        # Compact rows (issue 16): the chain hash as its 32 bytes (was 64 hex characters), and
        # no device_key column value or index: a frame already captured is known by its run in
        # captured_frames, and the records of one frame are told apart in the commit
        # (agent/buffer.py). Rows written before keep their values; they are read alike.
        "0006-compact-rows",
        """
        DROP INDEX IF EXISTS records_device_key;
        """,
    ),
    (
        # Stored as ranges (issue 16): the seqs the collector stored are kept as ranges, merged
        # as they touch (agent/upload_states.py), not written into each record: an ack of a
        # batch writes one small row instead of rewriting the batch's rows. The ranges of the
        # records stored before are made here from their state: every seq given that is not
        # a record with state 0, 2 or 3 (stored, or deleted: only stored records are deleted);
        # the rows keep their state, no record is rewritten. The partial index of the
        # pending records goes (every new record would be in it); rejected records and
        # conflicts, the few written per record, get one. record_states: each record's state.
        "0007-stored-ranges",
        """
        CREATE TABLE stored_ranges (
            first INTEGER PRIMARY KEY,        -- first seq of the range
            last INTEGER NOT NULL,            -- last seq of the range
            acked_ms INTEGER                  -- host wall clock at its latest answer
        );
        CREATE INDEX stored_ranges_last ON stored_ranges (last);
        WITH breaks (seq) AS (
                SELECT 0
                UNION ALL SELECT seq FROM records WHERE state != 1
                UNION ALL SELECT CAST(value AS INTEGER) + 1 FROM meta WHERE key = 'last_seq'),
            spans (after, upto) AS (
                SELECT seq, LEAD(seq) OVER (ORDER BY seq) FROM breaks)
        INSERT INTO stored_ranges (first, last, acked_ms)
            SELECT after + 1, upto - 1, (SELECT MAX(acked_ms) FROM records
                                         WHERE seq BETWEEN after + 1 AND upto - 1)
            FROM spans WHERE upto - after > 1;
        DROP INDEX IF EXISTS records_pending;
        CREATE INDEX records_answered ON records (seq) WHERE state >= 2;
        CREATE VIEW record_states AS
            SELECT seq, CASE
                WHEN state >= 2 THEN state
                WHEN (SELECT s.last FROM stored_ranges s WHERE s.first <= records.seq
                      ORDER BY s.first DESC LIMIT 1) >= records.seq THEN 1
                ELSE 0 END AS state
            FROM records;
        """,
    ),
    (
        # Each thing stored once (issue 16): a record's body holds its JSON without agent (the
        # buffer's, in meta), seq (the row's) and prev (its own column, 32 bytes), written back
        # when it is read (agent/buffer_rows.py sent_body); its own hash is the next record's
        # prev (meta last_hash for the newest), so the hash column stays NULL. Rows written
        # before keep their whole body and hash (prev NULL), as do records the split does not
        # fit; nothing is rewritten. record_bodies: each record's body as sent, in SQL (with the
        # columns to choose records by).
        "0008-compact-bodies",
        """
        ALTER TABLE records ADD COLUMN prev BLOB;
        CREATE VIEW record_bodies AS
            SELECT seq, ts_ms, kind, source, CASE WHEN prev IS NULL THEN body ELSE
                substr(body, 1, instr(body, ',"kind":') + 9 + length(kind))
                || ',"agent":' || (SELECT json_quote(value) FROM meta WHERE key = 'agent')
                || ',"seq":' || seq || ',"prev":"' || lower(hex(prev)) || '"'
                || substr(body, instr(body, ',"kind":') + 10 + length(kind)) END AS body
            FROM records;
        """,
    ),
    (
        # No frame-number index (issue 16: every registrador record was written into it). Its
        # one reader is last_device_seq, once when the registrador's source starts; that query
        # orders by seq and stops at the source's newest numbered record, a backward walk of
        # the table from its end (with the index SQLite read and sorted all of the source's
        # entries instead). Frames already captured are known by captured_frames (0005).
        "0009-no-frame-index",
        """
        DROP INDEX IF EXISTS records_device_seq;
        """,
    ),
)


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open: on SQLITE_FULL SQLite may have rolled it back
    already, and a second ROLLBACK would hide the real error."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` before the block, ``COMMIT`` after; on any exception roll back, re-raise."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet applied; return their names."""
    applied: list[str] = []
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_ms INTEGER NOT NULL)"
    )
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        with transaction(conn):
            for statement in sql.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, hostclock.wall_ms()))
        applied.append(name)
    return applied
