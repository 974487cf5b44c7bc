"""The store's read-only summaries (collector/store_summary.py) and its one migration list
(collector/store_schema.py), on SQLite and on PostgreSQL."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import psycopg
import pytest

from collector.store import Reject, StoreError, open_store, record_row
from collector.store_schema import MIGRATIONS
from protocols.records import make_record, ms_to_ts
from tests.collector.helpers import T0, speed

V1, V2 = "ABC1D23", "XYZ9K88"


def _door(vehicle: str, agent: str, seq: int, boarded: int, alighted: int) -> dict[str, object]:
    return make_record("door", vehicle, ms_to_ts(T0 + seq * 1000), agent=agent, seq=seq, door=1,
                       open=False, boarded=boarded, alighted=alighted)


def test_totals_and_a_vehicles_summary(store_url: str) -> None:
    store = open_store(store_url)
    try:
        empty = store.totals()
        assert (empty.records, empty.rejects, empty.last_received_ms) == (0, 0, None)
        rows = [record_row(speed(V1, "a1", s, odometer_m=100_000 + 15 * s), T0 + s) for s in (1, 2, 3)]
        rows.append(record_row(_door(V1, "a1", 4, boarded=5, alighted=2), T0 + 10))
        rows.append(record_row(_door(V1, "a1", 5, boarded=3, alighted=1), T0 + 11))
        rows.append(record_row(speed(V1, "a2", 1, at_s=9, odometer_m=100_200), T0 + 12))
        rows.append(record_row(speed(V2, "b1", 1, odometer_m=7), T0 + 13))
        reject = Reject(T0, "frota/v1/ABC1D23/up", V1, "a1", 9, 9, "bad", b"{}")
        store.put(rows, [reject])
        totals = store.totals()
        assert (totals.records, totals.rejects, totals.last_received_ms) == (7, 1, T0 + 13)

        summary = store.vehicle_summary(V1)
    finally:
        store.close()
    # By hand: V1 has 4 speed (seqs 1-3 of a1 at T0+1..3 s, seq 1 of a2 at T0+9 s) and 2 doors.
    assert summary.kinds == [("speed", 4), ("door", 2)]
    assert summary.total == 6
    assert (summary.first_ms, summary.last_ms) == (T0 + 1000, T0 + 9000)
    assert summary.agents == 2
    assert summary.odometer_m == (100_015, 100_200)
    assert (summary.boarded, summary.alighted) == (8, 3)


def test_a_read_only_store_reads_and_never_writes(store_url: str, tmp_path: Path) -> None:
    writer = open_store(store_url)
    try:
        writer.put([record_row(speed(V1, "a1", 1), T0)])
        reader = open_store(store_url, read_only=True)
        try:
            assert reader.totals().records == 1
            with pytest.raises(StoreError):
                reader.put([record_row(speed(V1, "a1", 2), T0)])
            assert reader.count() == 1
        finally:
            reader.close()
    finally:
        writer.close()


def test_a_read_only_store_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database at"):
        open_store(str(tmp_path / "none.db"), read_only=True)
    assert not (tmp_path / "none.db").exists()


def _sqlite_layout(path: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        layout = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
        layout["indexes"] = sorted(r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))
        return layout
    finally:
        conn.close()


@pytest.mark.postgres
def test_both_dialects_get_the_same_tables_columns_and_indexes(tmp_path: Path, postgres_dsn: str) -> None:
    open_store(str(tmp_path / "c.db")).close()
    sqlite_layout = _sqlite_layout(tmp_path / "c.db")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}".encode())
        try:
            open_store(f"{postgres_dsn}?options=-csearch_path%3D{schema}").close()
            pg: dict[str, list[str]] = {}
            for table, column in conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = %s ORDER BY table_name, ordinal_position", (schema,)):
                pg.setdefault(table, []).append(column)
            pg["indexes"] = sorted(r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname NOT LIKE "
                "'%%_pkey'", (schema,)))
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE".encode())
    assert pg == sqlite_layout


# The SQLite tables as the releases before the one migration list made them (sqlite-utils'
# create(), copied from such a database's sqlite_master): a database of then must migrate on.
_RELEASED_SQLITE_001_004 = """
CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT);
CREATE TABLE "records" ("id" INTEGER PRIMARY KEY, "vehicle" TEXT NOT NULL, "agent" TEXT NOT NULL,
  "seq" INTEGER NOT NULL, "ts" TEXT NOT NULL, "ts_ms" INTEGER NOT NULL, "kind" TEXT NOT NULL,
  "device_seq" INTEGER, "device_key" TEXT, "raw" TEXT, "record" TEXT NOT NULL,
  "received_ms" INTEGER NOT NULL);
CREATE UNIQUE INDEX "idx_records_vehicle_agent_seq" ON "records" ("vehicle", "agent", "seq");
CREATE INDEX "idx_records_vehicle_ts_ms_seq" ON "records" ("vehicle", "ts_ms", "seq");
CREATE UNIQUE INDEX idx_records_device ON records (vehicle, device_key) WHERE device_key IS NOT NULL;
CREATE TABLE "rejects" ("id" INTEGER PRIMARY KEY, "received_ms" INTEGER NOT NULL,
  "topic" TEXT NOT NULL, "vehicle" TEXT, "agent" TEXT, "first_seq" INTEGER, "last_seq" INTEGER,
  "reason" TEXT NOT NULL, "payload" BLOB NOT NULL);
CREATE INDEX "idx_rejects_vehicle_received_ms" ON "rejects" ("vehicle", "received_ms");
CREATE TABLE "vehicles" ("vehicle" TEXT PRIMARY KEY, "last_ts_ms" INTEGER NOT NULL,
  "last_received_ms" INTEGER NOT NULL, "agent" TEXT);
CREATE TABLE findings (id TEXT PRIMARY KEY, rule TEXT NOT NULL, vehicle TEXT, driver TEXT,
  start_ms BIGINT NOT NULL, end_ms BIGINT, finding TEXT NOT NULL);
CREATE TABLE findings_state (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO migrations VALUES ('001_records', '2026-01-01T00:00:00Z'),
  ('002_rejects', '2026-01-01T00:00:00Z'), ('003_vehicles', '2026-01-01T00:00:00Z'),
  ('004_findings', '2026-01-01T00:00:00Z');
INSERT INTO records (vehicle, agent, seq, ts, ts_ms, kind, record, received_ms)
  VALUES ('ABC1D23', 'a1', 1, '2026-03-02T14:10:01.000Z', 1772460601000, 'speed', '{}', 1);
"""


def test_a_sqlite_database_of_an_earlier_release_migrates_on(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(_RELEASED_SQLITE_001_004)
    conn.close()
    fresh = tmp_path / "new.db"
    open_store(str(fresh)).close()
    store = open_store(str(path))
    try:
        assert store.count() == 1
        store.put([], [Reject(T0, "t", V1, "a1", 1, 1, "bad", b"x")])
        assert store.rejects(1)[0]["dropped_bytes"] == 0  # 005 added the column
    finally:
        store.close()
    applied = sqlite3.connect(path).execute("SELECT name FROM migrations ORDER BY name").fetchall()
    assert [name for (name,) in applied] == [m.name for m in MIGRATIONS]
    assert _sqlite_layout(path) == _sqlite_layout(fresh)
