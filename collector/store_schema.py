"""The collector's tables: ONE list of named migrations for both backends (SQLite, PostgreSQL).

Each migration is SQL both dialects run; where they differ, a word in braces names the
difference and :data:`DIALECT_WORDS` gives each dialect's text (an auto-numbered primary key, a
byte string). A migration that cannot be said that way carries one statement per dialect.
Applied in order, each once, recorded by name in the ``migrations`` table. Append, never edit one
that has shipped: a database made by the code of an earlier release must end with the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Dialect = Literal["sqlite", "postgresql"]

#: What ``{word}`` stands for in each dialect. SQLite's ``INTEGER PRIMARY KEY`` is the rowid
#: (64-bit, numbered by SQLite); PostgreSQL's equivalent is ``BIGSERIAL``.
DIALECT_WORDS: Final[dict[Dialect, dict[str, str]]] = {
    "sqlite": {"serial_pk": "INTEGER PRIMARY KEY", "bytes": "BLOB",
               "without_rowid": "WITHOUT ROWID"},
    "postgresql": {"serial_pk": "BIGSERIAL PRIMARY KEY", "bytes": "BYTEA", "without_rowid": ""},
}


@dataclass(frozen=True)
class Migration:
    """One named step: ``sql`` for both dialects, or ``per_dialect`` where they cannot share it."""

    name: str
    sql: str = ""
    per_dialect: tuple[tuple[Dialect, str], ...] = ()
    #: Whole statements per dialect, run after the others as given (never split, never
    #: formatted): a trigger's or a function's body holds semicolons of its own.
    whole: tuple[tuple[Dialect, tuple[str, ...]], ...] = ()

    def statements(self, dialect: Dialect) -> list[str]:
        """The statements to run, in order, for ``dialect`` (``;``-separated in the source; no
        literal here contains a semicolon), then its ``whole`` statements."""
        text = dict(self.per_dialect).get(dialect, self.sql).format_map(DIALECT_WORDS[dialect])
        split = [part.strip() for part in text.split(";") if part.strip()]
        return split + list(dict(self.whole).get(dialect, ()))


#: The articles that keep records for the retention period (every refusal below names them).
_KEPT_BY: Final = "(Decreto SP 29.913/1989 art. 61 §3, Regulamento TO art. 66 §1)"
#: What refuses a DELETE of records outside the prune and the compaction (one line, the
#: articles): the prune deletes them past the retention period, the compaction deletes none (it
#: moves a day's rows into that day's disc row, written first). Migration ``018_refusal_text``.
DELETE_REFUSED: Final = (
    "records are deleted only by frota collector prune, past the retention period, and moved "
    "only by frota collector compact, into their compacted day " + _KEPT_BY
)
#: What refuses a DELETE of a compacted day while its records are not rows again.
DISC_DAY_DELETE_REFUSED: Final = (
    "a compacted day is deleted only by frota collector prune, past the retention period, "
    "or once a late record has made its records rows again " + _KEPT_BY
)
#: The refusals' text as migrations 008 and 012 wrote it (shipped: never edited, replaced by
#: 018 in every database).
_DELETE_REFUSED_008: Final = (
    "records are deleted only by frota collector prune, past the retention period " + _KEPT_BY
)


def _sqlite_guards(records: str, disc_days: str) -> tuple[str, ...]:
    """SQLite's triggers (012 on): a record may go inside the prune, or inside the compaction
    where a disc day covers its time; a disc day inside the prune, or once its records are rows."""
    return (
        "CREATE TRIGGER records_delete_guard BEFORE DELETE ON records "
        "WHEN NOT EXISTS (SELECT 1 FROM prune_gate) AND NOT (EXISTS (SELECT 1 FROM "
        "compact_gate) AND EXISTS (SELECT 1 FROM disc_days d WHERE "
        "d.vehicle = OLD.vehicle AND d.last_ms >= OLD.ts_ms AND "
        "d.first_ms <= OLD.ts_ms)) BEGIN "
        f"SELECT RAISE(ABORT, '{records}'); END",
        "CREATE TRIGGER disc_days_delete_guard BEFORE DELETE ON disc_days "
        "WHEN NOT EXISTS (SELECT 1 FROM prune_gate) AND (SELECT count(*) FROM records r "
        "WHERE r.vehicle = OLD.vehicle AND r.ts_ms >= OLD.first_ms AND "
        "r.ts_ms <= OLD.last_ms) < OLD.records BEGIN "
        f"SELECT RAISE(ABORT, '{disc_days}'); END",
    )


def _pg_records_row_guard(records: str) -> str:
    """PostgreSQL's function behind ``records_delete_guard`` (012 on): as :func:`_sqlite_guards`."""
    return (
        "CREATE OR REPLACE FUNCTION frota_records_delete_row() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        "IF coalesce(current_setting('frota.prune', true), '') <> 'on' AND NOT "
        "(coalesce(current_setting('frota.compact', true), '') = 'on' AND EXISTS "
        "(SELECT 1 FROM disc_days d WHERE d.vehicle = OLD.vehicle AND "
        "d.last_ms >= OLD.ts_ms AND d.first_ms <= OLD.ts_ms)) THEN "
        f"RAISE EXCEPTION '{records}'; END IF; RETURN OLD; END $$"
    )


def _pg_disc_days_row_guard(disc_days: str, replace: bool) -> str:
    """PostgreSQL's function behind ``disc_days_delete_guard``: as :func:`_sqlite_guards`."""
    return (
        f"CREATE {'OR REPLACE ' if replace else ''}FUNCTION frota_disc_days_delete_row() "
        "RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN IF coalesce(current_setting('frota.prune', true), '') <> 'on' AND "
        "(SELECT count(*) FROM records r WHERE r.vehicle = OLD.vehicle AND "
        "r.ts_ms >= OLD.first_ms AND r.ts_ms <= OLD.last_ms) < OLD.records THEN "
        f"RAISE EXCEPTION '{disc_days}'; END IF; RETURN OLD; END $$"
    )


def _pg_truncate_guard(function: str, message: str, replace: bool) -> str:
    """A PostgreSQL function refusing TRUNCATE outside the prune."""
    return (
        f"CREATE {'OR REPLACE ' if replace else ''}FUNCTION {function}() RETURNS trigger "
        "LANGUAGE plpgsql AS "
        "$$ BEGIN IF coalesce(current_setting('frota.prune', true), '') <> 'on' THEN "
        f"RAISE EXCEPTION '{message}'; END IF; RETURN NULL; END $$"
    )


#: Migration 020's second half: the vehicles whose rows came before it wait for their minutes.
_SPEED_MINUTES_PENDING: Final = """
    CREATE TABLE speed_minutes_pending (vehicle TEXT PRIMARY KEY);
    INSERT INTO speed_minutes_pending (vehicle) SELECT vehicle FROM vehicles
"""

MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        "001_records",
        """
        CREATE TABLE records (
            id {serial_pk},
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
    Migration(
        "002_rejects",
        """
        CREATE TABLE rejects (
            id {serial_pk},
            received_ms BIGINT NOT NULL,
            topic TEXT NOT NULL,
            vehicle TEXT,
            agent TEXT,
            first_seq BIGINT,
            last_seq BIGINT,
            reason TEXT NOT NULL,
            payload {bytes} NOT NULL
        );
        CREATE INDEX idx_rejects_vehicle_received_ms ON rejects (vehicle, received_ms);
        """,
    ),
    Migration(
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
    Migration(
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
    Migration(
        # How many payload bytes a reject had when its payload was dropped (rejects_max_mb).
        "005_rejects_dropped",
        "ALTER TABLE rejects ADD COLUMN dropped_bytes BIGINT NOT NULL DEFAULT 0;",
    ),
    Migration(
        # Chained records (collector/store_chain.py, docs/trust.md): links (every agent record
        # seen, hash-only entries included), the agents' signed checkpoints, conflicting records
        # kept whole, integrity events (equipment.integrity), the verifier's cursor per agent.
        "006_chain",
        """
        CREATE TABLE links (vehicle TEXT NOT NULL, agent TEXT NOT NULL, seq BIGINT NOT NULL,
            hash TEXT NOT NULL, prev TEXT, state TEXT NOT NULL, received_ms BIGINT NOT NULL,
            PRIMARY KEY (vehicle, agent, seq));
        CREATE TABLE checkpoints (vehicle TEXT NOT NULL, agent TEXT NOT NULL, seq BIGINT NOT NULL,
            hash TEXT NOT NULL, key TEXT NOT NULL, sig TEXT NOT NULL, received_ms BIGINT NOT NULL,
            state TEXT NOT NULL DEFAULT 'new', PRIMARY KEY (vehicle, agent, seq, key));
        CREATE INDEX checkpoints_state ON checkpoints (state);
        CREATE TABLE conflicts (id {serial_pk}, vehicle TEXT NOT NULL, agent TEXT NOT NULL,
            seq BIGINT NOT NULL, hash TEXT NOT NULL, cause TEXT NOT NULL, record TEXT NOT NULL,
            received_ms BIGINT NOT NULL);
        CREATE TABLE integrity (id {serial_pk}, vehicle TEXT NOT NULL, agent TEXT NOT NULL,
            seq BIGINT NOT NULL, cause TEXT NOT NULL, detail TEXT NOT NULL, ts_ms BIGINT,
            found_ms BIGINT NOT NULL);
        CREATE UNIQUE INDEX integrity_key ON integrity (vehicle, agent, seq, cause);
        CREATE TABLE chain_state (vehicle TEXT NOT NULL, agent TEXT NOT NULL, seq BIGINT NOT NULL,
            hash TEXT NOT NULL, PRIMARY KEY (vehicle, agent))
        """,
    ),
    Migration(
        # The few records that are not 1 Hz samples (driver, trip, door, device, incident,
        # report), by vehicle and time: the pages read a driver's day across every vehicle and
        # a trip's events without scanning the samples (collector/web/dayview.py). Partial, so
        # that storing speed and position samples does not pay for it.
        "007_records_events",
        """
        CREATE INDEX idx_records_events ON records (vehicle, ts_ms)
            WHERE kind NOT IN ('speed', 'position');
        """,
    ),
    Migration(
        # Retention (docs/collector.md, "Retention"): legal holds, the prunes done, and a guard
        # that refuses any DELETE of records except inside the prune's own transactions (which
        # open the gate: a row of prune_gate in SQLite, SET LOCAL frota.prune in PostgreSQL).
        "008_retention",
        """
        CREATE TABLE holds (id {serial_pk}, vehicle TEXT NOT NULL, since_ms BIGINT NOT NULL,
            until_ms BIGINT NOT NULL, reason TEXT NOT NULL, made_by TEXT NOT NULL,
            made_ms BIGINT NOT NULL, released_by TEXT, released_ms BIGINT);
        CREATE INDEX idx_holds_vehicle ON holds (vehicle, since_ms);
        CREATE TABLE prunes (id {serial_pk}, vehicle TEXT NOT NULL, before_ms BIGINT NOT NULL,
            deleted BIGINT NOT NULL, done_ms BIGINT NOT NULL);
        CREATE TABLE prune_gate (opened_ms BIGINT NOT NULL)
        """,
        whole=(
            ("sqlite", (
                "CREATE TRIGGER records_delete_guard BEFORE DELETE ON records "
                "WHEN NOT EXISTS (SELECT 1 FROM prune_gate) BEGIN "
                f"SELECT RAISE(ABORT, '{_DELETE_REFUSED_008}'); END",
            )),
            ("postgresql", (
                "CREATE FUNCTION frota_records_delete_guard() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN IF coalesce(current_setting('frota.prune', true), '') <> 'on' THEN "
                f"RAISE EXCEPTION '{_DELETE_REFUSED_008}'; END IF; RETURN NULL; END $$",
                "CREATE FUNCTION frota_records_delete_row() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN IF coalesce(current_setting('frota.prune', true), '') <> 'on' THEN "
                f"RAISE EXCEPTION '{_DELETE_REFUSED_008}'; END IF; RETURN OLD; END $$",
                "CREATE TRIGGER records_delete_guard BEFORE DELETE ON records FOR EACH ROW "
                "EXECUTE FUNCTION frota_records_delete_row()",
                "CREATE TRIGGER records_truncate_guard BEFORE TRUNCATE ON records "
                "FOR EACH STATEMENT EXECUTE FUNCTION frota_records_delete_guard()",
            )),
        ),
    ),
    Migration(
        # A vehicle's registrador speed samples by time with their km/h (the expression the
        # store's json_number_sql reads): the Disco do dia reads a day of them (86,400 at 1 Hz)
        # from the index, without parsing each record's JSON nor touching the position samples
        # (collector/store_summary.py, speeds; bench/disc_page.py: ~4x faster than through
        # idx_records_vehicle_ts_ms_seq). Partial: only speed rows pay for it.
        "009_records_speed",
        per_dialect=(
            ("sqlite", "CREATE INDEX idx_records_speed ON records "
                       "(vehicle, ts_ms, json_extract(record, '$.kmh')) WHERE kind = 'speed'"),
            ("postgresql", "CREATE INDEX idx_records_speed ON records "
                           "(vehicle, ts_ms, ((record::jsonb ->> 'kmh')::numeric)) "
                           "WHERE kind = 'speed'"),
        ),
    ),
    Migration(
        # Rejects replayed (frota collector rejects replay, collector/rejects_replay.py): when,
        # and what became of each (stored N, or final: the reason it can never be accepted).
        "010_rejects_replay",
        """
        ALTER TABLE rejects ADD COLUMN replayed_ms BIGINT;
        ALTER TABLE rejects ADD COLUMN replay TEXT
        """,
    ),
    Migration(
        # Incremental live rules (collector/live_rules.py, docs/collector.md "Live findings"):
        # the engine state of each partition at device-time boundaries (live_checkpoints; tail:
        # 1 for the one after the newest records, replaced at each evaluation), the partition of
        # each vehicle, and for each finding its partition and the record time it was kept at
        # (NULL: open at as_of) so that a replay from a boundary redoes exactly its own.
        "011_live_rules",
        """
        CREATE TABLE live_checkpoints (part TEXT NOT NULL, boundary_ms BIGINT NOT NULL,
            tail INTEGER NOT NULL, state {bytes} NOT NULL, made_ms BIGINT NOT NULL,
            PRIMARY KEY (part, tail, boundary_ms));
        CREATE TABLE live_parts (vehicle TEXT PRIMARY KEY, part TEXT NOT NULL);
        ALTER TABLE findings ADD COLUMN part TEXT;
        ALTER TABLE findings ADD COLUMN kept_ms BIGINT;
        CREATE INDEX idx_findings_part ON findings (part, kept_ms)
        """,
    ),
    Migration(
        # The digital disc at rest (collector/compaction.py, collector/store_disc.py,
        # docs/collector.md "The digital disc at rest"): one row per compacted vehicle-day (its
        # local day in the vehicle's profile's zone and that day's bounds, the records' count,
        # first and last device time, the chain hash of its first and last record, the blob of
        # collector/disc.py and its codec version, the records' arrival times); the days a late
        # record reopened (compacted again by the next run). The guards: a record may be deleted
        # outside the prune only where a disc day covers its time (the compaction, which writes
        # the day first), and a disc day only inside the prune or once its records are rows
        # again (a late record reopening it): one copy of every record always stays.
        "012_disc",
        """
        CREATE TABLE disc_days (vehicle TEXT NOT NULL, day TEXT NOT NULL,
            day_start_ms BIGINT NOT NULL, day_end_ms BIGINT NOT NULL, records BIGINT NOT NULL,
            first_ms BIGINT NOT NULL, last_ms BIGINT NOT NULL, first_hash TEXT,
            last_hash TEXT, codec INTEGER NOT NULL, blob {bytes} NOT NULL,
            received {bytes} NOT NULL, made_ms BIGINT NOT NULL, PRIMARY KEY (vehicle, day));
        CREATE INDEX idx_disc_days_last ON disc_days (vehicle, last_ms);
        CREATE TABLE disc_reopened (vehicle TEXT NOT NULL, day TEXT NOT NULL,
            reopened_ms BIGINT NOT NULL, records BIGINT NOT NULL, PRIMARY KEY (vehicle, day));
        CREATE TABLE compact_gate (opened_ms BIGINT NOT NULL)
        """,
        whole=(
            ("sqlite", (
                "DROP TRIGGER records_delete_guard",
                *_sqlite_guards(_DELETE_REFUSED_008, _DELETE_REFUSED_008),
            )),
            ("postgresql", (
                _pg_records_row_guard(_DELETE_REFUSED_008),
                _pg_disc_days_row_guard(_DELETE_REFUSED_008, replace=False),
                "CREATE TRIGGER disc_days_delete_guard BEFORE DELETE ON disc_days FOR EACH ROW "
                "EXECUTE FUNCTION frota_disc_days_delete_row()",
                "CREATE TRIGGER disc_days_truncate_guard BEFORE TRUNCATE ON disc_days "
                "FOR EACH STATEMENT EXECUTE FUNCTION frota_records_delete_guard()",
            )),
        ),
    ),
    Migration(
        # The chain's links clustered on their key (SQLite): a rowid table with a primary key of
        # text columns is two B-trees, the rows and the key's index, each written for every
        # record stored; WITHOUT ROWID keeps the rows in the key's B-tree alone (about 65 bytes
        # less per record at rest, and less to write per batch: bench.chain, docs/trust.md).
        # Rebuilt with the same columns and rows. PostgreSQL tables are heaps: nothing to do.
        "013_links_without_rowid",
        per_dialect=(
            ("sqlite", """
                CREATE TABLE links_clustered (vehicle TEXT NOT NULL, agent TEXT NOT NULL,
                    seq BIGINT NOT NULL, hash TEXT NOT NULL, prev TEXT, state TEXT NOT NULL,
                    received_ms BIGINT NOT NULL, PRIMARY KEY (vehicle, agent, seq)) WITHOUT ROWID;
                INSERT INTO links_clustered (vehicle, agent, seq, hash, prev, state, received_ms)
                    SELECT vehicle, agent, seq, hash, prev, state, received_ms FROM links;
                DROP TABLE links;
                ALTER TABLE links_clustered RENAME TO links
                """),
            ("postgresql", ""),
        ),
    ),
    Migration(
        # Evaluation leases (collector/live_leases.py, docs/deployment.md): with several
        # collectors on one PostgreSQL store, the collector that evaluates each partition
        # until when (the database's clock, ms), and the live collectors (each one's share).
        "014_live_leases",
        """
        CREATE TABLE live_leases (part TEXT PRIMARY KEY, holder TEXT NOT NULL,
            until_ms BIGINT NOT NULL);
        CREATE TABLE live_members (holder TEXT PRIMARY KEY, until_ms BIGINT NOT NULL)
        """,
    ),
    Migration(
        # retention.minimum without reading the minimum period (collector/retention_days.py):
        # per vehicle and local day (in the zone named), what the rule judges summed up (seq
        # runs per agent, registrador frame runs, framed hours, GPS speed per hour) as JSON.
        "015_retention_days",
        """
        CREATE TABLE retention_days (vehicle TEXT NOT NULL, day TEXT NOT NULL,
            zone TEXT NOT NULL, summary TEXT NOT NULL, PRIMARY KEY (vehicle, day))
        """,
    ),
    Migration(
        # Chain links folded into compacted days (collector/compaction.py, docs/collector.md "The
        # digital disc at rest"): where every record of a day had its link (stored, the same
        # hash) and the live verifier had walked past it, the day keeps the hash of the last
        # record of each unbroken stretch of its chain (zstd JSON) and its link rows go; a
        # reopened or pruned day gets its link rows back.
        "016_disc_links",
        "ALTER TABLE disc_days ADD COLUMN links {bytes}",
    ),
    Migration(
        # What the Disco do dia draws of a compacted day, written with its row by the compaction
        # job (collector/disc_summary.py): the page reads it instead of decoding the day's
        # columns. Gone with the row when a late record reopens the day; NULL on days compacted
        # before (read as before).
        "017_disc_summary",
        "ALTER TABLE disc_days ADD COLUMN summary {bytes}",
    ),
    Migration(
        # The refusals say what they refuse (collector/store_schema.py, DELETE_REFUSED): a record
        # leaves its row by the prune (deleted past the retention period) or by the compaction
        # (moved into its compacted day, deleting none); a compacted day goes by the prune or
        # when a late record made its records rows again. Same guards, new text; in PostgreSQL
        # a TRUNCATE of disc_days says so with a function of its own.
        "018_refusal_text",
        whole=(
            ("sqlite", (
                "DROP TRIGGER records_delete_guard",
                "DROP TRIGGER disc_days_delete_guard",
                *_sqlite_guards(DELETE_REFUSED, DISC_DAY_DELETE_REFUSED),
            )),
            ("postgresql", (
                _pg_truncate_guard("frota_records_delete_guard", DELETE_REFUSED, replace=True),
                _pg_records_row_guard(DELETE_REFUSED),
                _pg_disc_days_row_guard(DISC_DAY_DELETE_REFUSED, replace=True),
                _pg_truncate_guard("frota_disc_days_truncate_guard", DISC_DAY_DELETE_REFUSED,
                                   replace=False),
                "DROP TRIGGER disc_days_truncate_guard ON disc_days",
                "CREATE TRIGGER disc_days_truncate_guard BEFORE TRUNCATE ON disc_days "
                "FOR EACH STATEMENT EXECUTE FUNCTION frota_disc_days_truncate_guard()",
            )),
        ),
    ),
    Migration(
        # A stored record's chain hash and prev in its own row (collector/store_chain.py,
        # docs/trust.md; prev also in the record, a column so the verifier reads no JSON):
        # ``links`` keeps only the hash-only entries (rejected, frame, conflict, pruned) and the
        # records whose rows are gone to a compacted day not folded; writing a link row for
        # every record stored was a third of what the chain cost the ingest (bench.chain). The
        # hash of every link of a stored record moves into its row (whatever the link's state:
        # a record refused, then accepted, keeps the hash of both), and the link goes when it
        # said ``stored`` with that very hash; a link whose record is gone, or whose hash is
        # not the one in the row, stays (frota verify reports it as before).
        "019_records_hash",
        per_dialect=(
            ("sqlite", """
                ALTER TABLE records ADD COLUMN hash TEXT;
                ALTER TABLE records ADD COLUMN prev TEXT;
                UPDATE records SET (hash, prev) = (SELECT l.hash, l.prev FROM links l WHERE
                    l.vehicle = records.vehicle AND l.agent = records.agent AND
                    l.seq = records.seq)
                    WHERE EXISTS (SELECT 1 FROM links l WHERE l.vehicle = records.vehicle AND
                    l.agent = records.agent AND l.seq = records.seq);
                DELETE FROM links WHERE state = 'stored' AND EXISTS (SELECT 1 FROM records r
                    WHERE r.vehicle = links.vehicle AND r.agent = links.agent AND
                    r.seq = links.seq AND r.hash = links.hash)
                """),
            ("postgresql", """
                ALTER TABLE records ADD COLUMN hash TEXT;
                ALTER TABLE records ADD COLUMN prev TEXT;
                UPDATE records r SET hash = l.hash, prev = l.prev FROM links l WHERE
                    l.vehicle = r.vehicle AND l.agent = r.agent AND l.seq = r.seq;
                DELETE FROM links l USING records r WHERE l.state = 'stored' AND
                    r.vehicle = l.vehicle AND r.agent = l.agent AND r.seq = l.seq AND
                    r.hash = l.hash
                """),
        ),
    ),
    Migration(
        # What the Disco do dia draws of a day still as rows, per vehicle, sample kind and UTC
        # minute, kept by the ingest in the transaction that stores the records
        # (collector/speed_minutes.py); the vehicles that had rows before it are pending until
        # their minutes are rebuilt from the rows (frota collector compact, the daily job).
        "020_speed_minutes",
        sql="""
            CREATE TABLE speed_minutes (vehicle TEXT NOT NULL, kind TEXT NOT NULL,
                minute_ms BIGINT NOT NULL, n INTEGER NOT NULL, max_kmh DOUBLE PRECISION NOT NULL,
                max_ts BIGINT NOT NULL, min_kmh DOUBLE PRECISION NOT NULL,
                first_ts BIGINT NOT NULL, last_ts BIGINT NOT NULL,
                last_kmh DOUBLE PRECISION NOT NULL, incoming DOUBLE PRECISION NOT NULL,
                moving_in BIGINT NOT NULL, internal DOUBLE PRECISION NOT NULL,
                moving BIGINT NOT NULL, stop_kmh DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (vehicle, kind, minute_ms)) {without_rowid};
            """ + _SPEED_MINUTES_PENDING,
    ),
    Migration(
        # idx_records_speed without the JSON's kmh on PostgreSQL: its planner reads an index
        # column that is an expression only from the row (it never makes an index-only scan of
        # one whose column, here ``record``, is not in the index), so the expression bought the
        # reads nothing — the same bitmap scan of the index and the rows, measured — and cost
        # every speed row stored a parse of its JSON to jsonb: 3.7 of the 11.8 µs of server CPU
        # a record copied (docs/collector.md, "PostgreSQL by COPY"). Same name, same rows
        # (kind = 'speed'), keyed by vehicle and time. SQLite reads the km/h from its index
        # itself (a covering expression index): unchanged.
        "021_records_speed_pg",
        per_dialect=(
            ("sqlite", ""),
            ("postgresql", """
                DROP INDEX idx_records_speed;
                CREATE INDEX idx_records_speed ON records (vehicle, ts_ms) WHERE kind = 'speed'
                """),
        ),
    ),
    Migration(
        # A sample's km/h as a column, kept at insert (collector.speed_minutes.row_kmh: the
        # number of the record's JSON, as json_extract reads it): SQLite's idx_records_speed
        # held json_extract(record, '$.kmh'), so every speed row stored had its JSON parsed by
        # SQLite (≈ 0.35 µs a record of the ingest's commit, docs/collector.md, "Where the
        # ingest's CPU goes"); it now holds the column, which the Disco do dia's rows path and
        # the speed minutes' recompute read from the index alone as before (positions read it
        # from their rows without a parse). The rows stored before get it from their JSON here
        # (a one-time pass over the sample rows: ≈ 2.5 µs a row on SQLite). PostgreSQL gets the
        # same column (one ``records`` for both backends) and keeps its index of 021.
        "022_records_kmh",
        per_dialect=(
            ("sqlite", """
                ALTER TABLE records ADD COLUMN kmh REAL;
                UPDATE records SET kmh = CAST(json_extract(record, '$.kmh') AS REAL)
                    WHERE kind IN ('speed', 'position')
                    AND json_type(record, '$.kmh') IN ('integer', 'real');
                DROP INDEX idx_records_speed;
                CREATE INDEX idx_records_speed ON records (vehicle, ts_ms, kmh) WHERE kind = 'speed'
                """),
            ("postgresql", """
                ALTER TABLE records ADD COLUMN kmh DOUBLE PRECISION;
                UPDATE records SET kmh = (record::jsonb ->> 'kmh')::double precision
                    WHERE kind IN ('speed', 'position')
                    AND jsonb_typeof(record::jsonb -> 'kmh') = 'number'
                """),
        ),
    ),
)
