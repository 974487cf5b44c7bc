"""The store's keys, order, rejects and migrations, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from collector.ingest import Ingest
from collector.store import INSERT_RECORD, Reject, Store, StoreError, open_store, record_row
from protocols.records import device_key, ts_to_ms
from protocols.uplink import Ack, encode_batch
from tests.collector.helpers import T0, speed

V1, V2 = "ABC1D23", "XYZ9K88"


def _seqs(store: Store, vehicle: str, since: int | None = None, until: int | None = None) -> list[int]:
    return [json.loads(text)["seq"] for text in store.records(vehicle, since, until)]


def test_a_record_is_stored_once_by_vehicle_agent_seq(store: Store) -> None:
    rows = [record_row(speed(V1, "a1", seq), T0) for seq in (1, 2, 3)]
    assert store.put(rows) == 3
    assert store.put(rows) == 0
    # the same seq from another agent, or of another vehicle, is another record
    assert store.put([record_row(speed(V1, "a2", 1), T0), record_row(speed(V2, "a1", 1), T0)]) == 2
    assert store.count() == 5
    assert store.count(V1) == 4


def test_the_same_device_frame_under_another_seq_is_one_record(store: Store) -> None:
    frame = speed(V1, "a1", 1, device_seq=7)
    assert store.put([record_row(frame, T0)]) == 1
    assert store.put([record_row({**frame, "seq": 2}, T0)]) == 0  # history download
    # same device_seq but another kind, another slot, or another device time: other records
    driver = {"vehicle": V1, "ts": frame["ts"], "kind": "driver", "agent": "a1", "seq": 3,
              "slot": 1, "driver": "D-1", "activity": "drive", "device_seq": 7}
    rows = [
        record_row(driver, T0),
        record_row({**driver, "seq": 4, "slot": 2}, T0),
        record_row(speed(V1, "a1", 5, at_s=86_400, device_seq=7), T0),
    ]
    assert store.put(rows) == 3
    assert _seqs(store, V1) == [1, 3, 4, 5]


def test_two_device_statuses_of_one_frame_are_two_records(store: Store) -> None:
    # One status frame can raise tamper and compartment_open together (registrador.md):
    # both records share device_seq and ts, and both must be kept; the history copy is not.
    base = {"vehicle": V1, "ts": speed(V1, "a1", 1)["ts"], "kind": "device", "agent": "a1",
            "device": "registrador", "device_seq": 9}
    tamper = {**base, "seq": 1, "status": "tamper"}
    opened = {**base, "seq": 2, "status": "compartment_open"}
    assert store.put([record_row(tamper, T0), record_row(opened, T0)]) == 2
    assert store.put([record_row({**tamper, "seq": 3}, T0), record_row({**opened, "seq": 4}, T0)]) == 0


def test_device_key_is_kind_part_device_seq_and_device_time() -> None:
    rec = speed(V1, "a1", 1, device_seq=42)
    assert device_key(rec, ts_to_ms(rec["ts"])) == f"speed:0:42:{T0 + 1000}"
    status = {**rec, "kind": "device", "device": "registrador", "status": "tamper"}
    assert device_key(status, T0) == f"device:tamper:42:{T0}"
    assert device_key(speed(V1, "a1", 1), T0) is None


def test_records_come_in_ts_then_seq_order_within_bounds(store: Store) -> None:
    records = [
        speed(V1, "a1", 5, at_s=1),
        speed(V1, "a1", 4, at_s=1),
        speed(V1, "a1", 1, at_s=3),
        speed(V1, "a1", 2, at_s=0),
        speed(V2, "a1", 3, at_s=2),
    ]
    store.put([record_row(r, T0) for r in records])
    assert _seqs(store, V1) == [2, 4, 5, 1]
    assert _seqs(store, V1, T0 + 1000, T0 + 3000) == [4, 5]  # since inclusive, until exclusive
    assert _seqs(store, "NOPE") == []


def test_records_page_through_large_results(store: Store) -> None:
    rows = [record_row(speed(V1, "a1", seq, at_s=seq // 3), T0) for seq in range(1, 2502)]
    store.put(rows)
    assert _seqs(store, V1) == list(range(1, 2502))


def test_rejects_and_vehicle_state_are_kept(store: Store) -> None:
    reject = Reject(T0, "frota/v1/X/up", "X", None, None, None, "not JSON: …", b"\x00\xff")
    store.put([record_row(speed(V1, "a1", 1), T0)], [reject], [(V1, T0 + 1000, T0 + 9000, "a1")])
    store.put([], [], [(V1, T0, T0 + 5000, "a1")])  # older news never moves the state back
    assert store.reject_count() == 1
    assert store.rejects() == [
        {"received_ms": T0, "topic": "frota/v1/X/up", "vehicle": "X", "agent": None,
         "first_seq": None, "last_seq": None, "reason": "not JSON: …", "payload": b"\x00\xff",
         "dropped_bytes": 0}
    ]
    [state] = store.vehicles()
    assert (state.vehicle, state.last_ts_ms, state.last_received_ms) == (V1, T0 + 1000, T0 + 9000)


def _garbage(n: int, size: int) -> Reject:
    return Reject(T0 + n, "frota/v1/X/up", "X", None, None, None, f"garbage {n}", bytes([n]) * size)


def test_the_rejects_payload_bytes_are_bounded_oldest_payload_first(store_url: str) -> None:
    """A bound of 1000 payload bytes: rejects of 400, 400 and 400 bytes keep 1200 > 1000, so the
    oldest payload goes (800 kept); every row keeps its reason and says what was dropped."""
    store = open_store(store_url, rejects_max_bytes=1000)
    try:
        store.put([], [_garbage(1, 400), _garbage(2, 400)])
        assert store.rejects_tally.dropped == 0           # 800 <= 1000
        store.put([], [_garbage(3, 400)])
        assert [(r["reason"], r["payload"], r["dropped_bytes"]) for r in store.rejects()] == [
            ("garbage 3", b"\x03" * 400, 0),
            ("garbage 2", b"\x02" * 400, 0),
            ("garbage 1", b"", 400),
        ]
        assert (store.rejects_tally.dropped, store.rejects_tally.dropped_bytes) == (1, 400)
        assert store.reject_count() == 3
        ingest = Ingest(store, lambda: frozenset({V1}))
        health = ingest.health(300)
        assert (health["rejects"], health["rejects_payloads_dropped"],
                health["rejects_payload_bytes_dropped"]) == (3, 1, 400)
    finally:
        store.close()
    # reopened: the tally is read back (800 kept), so 300 more (1100) drop the next oldest (400)
    again = open_store(store_url, rejects_max_bytes=1000)
    try:
        assert (again.rejects_tally.kept_bytes, again.rejects_tally.dropped) == (800, 1)
        again.put([], [_garbage(4, 300)])
        assert [r["dropped_bytes"] for r in again.rejects()] == [0, 0, 400, 400]
        assert (again.rejects_tally.dropped, again.rejects_tally.dropped_bytes) == (2, 800)
        # one reject larger than the bound: every payload goes, its own too (700 + 1500 > 1000)
        again.put([], [_garbage(5, 1500)])
        assert [(r["reason"], r["payload"], r["dropped_bytes"]) for r in again.rejects()] == [
            ("garbage 5", b"", 1500),
            ("garbage 4", b"", 300),
            ("garbage 3", b"", 400),
            ("garbage 2", b"", 400),
            ("garbage 1", b"", 400),
        ]
        assert (again.rejects_tally.kept_bytes, again.rejects_tally.dropped,
                again.rejects_tally.dropped_bytes) == (0, 5, 3000)
    finally:
        again.close()


def test_without_a_bound_every_reject_payload_is_kept(store: Store) -> None:
    store.put([], [_garbage(n, 400) for n in range(1, 6)])
    assert [r["dropped_bytes"] for r in store.rejects()] == [0] * 5
    assert store.rejects_tally.kept_bytes == 2000


def test_reopening_applies_no_migration_twice_and_keeps_data(store_url: str) -> None:
    first = open_store(store_url)
    first.put([record_row(speed(V1, "a1", 1), T0)])
    first.close()
    again = open_store(store_url)
    try:
        assert again.migrate() == []
        assert again.count() == 1
    finally:
        again.close()


def test_opening_a_missing_or_broken_sqlite_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database at"):
        open_store(str(tmp_path / "missing.db"), create=False)
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(StoreError, match="file is not a database"):
        open_store(str(broken), create=False)


def test_the_ingest_on_either_backend(store: Store) -> None:
    ingest = Ingest(store, lambda: frozenset({V1}))
    payload = encode_batch(V1, "a1", [speed(V1, "a1", seq) for seq in (1, 2, 3)])
    assert ingest.handle(f"frota/v1/{V1}/up", payload) == (V1, Ack("a1", stored=[(1, 3)]))
    assert ingest.handle(f"frota/v1/{V1}/up", payload) == (V1, Ack("a1", stored=[(1, 3)]))
    assert ingest.handle(f"frota/v1/{V1}/up", b"junk") is None
    live = ingest.state.vehicles[V1]
    assert (live.batches, live.stored, live.duplicates, live.rejected) == (2, 3, 3, 1)
    assert (store.count(V1), store.reject_count()) == (3, 1)
    # a restarted collector starts from what the store knows
    again = Ingest(store, lambda: frozenset({V1}))
    assert again.state.rejects_total == 1
    assert again.state.vehicles[V1].last_ts_ms == T0 + 3000


def test_a_group_commit_counts_each_batch(store: Store) -> None:
    first = [record_row(speed(V1, "a1", seq), T0) for seq in (1, 2)]
    second = [record_row(speed(V1, "a1", seq), T0) for seq in (2, 3)]  # 2 is in both
    reject = Reject(T0, "frota/v1/X/up", "X", None, None, None, "not JSON", b"x")
    assert store.put_many([(first, [], []), (second, [reject], [(V1, T0, T0, "a1")])]) == [2, 1]
    assert (store.count(V1), store.reject_count()) == (3, 1)


def test_a_batch_is_stored_in_its_order_and_skips_what_it_repeats(store: Store) -> None:
    # PostgreSQL copies a group's records in one COPY, and when one is stored already moves
    # them through its stage in one INSERT … SELECT: a record twice in one batch, one stored
    # before, and columns that are NULL in every row must count as one insert per new record,
    # as the row by row insert does, with ids in the batch's order.
    assert store.put([record_row(speed(V1, "a1", 2), T0)]) == 1
    assert store.put([record_row(speed(V1, "a1", seq), T0) for seq in (9, 7, 8)]) == 3  # all new
    seqs = [5, 3, 2, 3, 4, 1]  # 3 twice, 2 already stored
    rows = [record_row(speed(V1, "a1", seq), T0) for seq in seqs]
    assert all(row[6] is None and row[8] is None for row in rows)  # no device_seq, no raw
    assert store.put(rows) == 4
    assert [json.loads(text)["seq"] for _, text in store.records_after(0)] == [2, 9, 7, 8, 5, 3,
                                                                               4, 1]


@pytest.mark.postgres
def test_postgres_writes_records_through_its_stage_once_per_write(postgres_dsn: str) -> None:
    from frota.harness.postgres import private_schema

    with private_schema(postgres_dsn) as (url, _):
        store = open_store(url)
        try:
            rows = [record_row(speed(V1, "a1", seq), T0) for seq in range(1, 7)]
            assert store.put(rows[:3]) == 3
            with store._lock, store._transaction() as tx:
                # 2 and 3 are stored: each write goes through the stage, which holds its rows only
                assert store._executemany(tx, INSERT_RECORD, rows[1:5]) == 2
                assert store._executemany(tx, INSERT_RECORD, rows[4:6]) == 1
                assert store._query("SELECT seq FROM pg_temp.frota_records_stage") == [(5,), (6,)]
            assert store._read("SELECT count(*) FROM pg_temp.frota_records_stage") == [(0,)]
            assert store.count(V1) == 6
            with pytest.raises(StoreError, match="inside a transaction"):
                store._executemany(store.conn.cursor(), INSERT_RECORD, rows)  # type: ignore[attr-defined]
        finally:
            store.close()


def test_links_move_to_a_table_clustered_on_their_key_with_every_row(tmp_path: Path) -> None:
    # A database from before 013_links_without_rowid: links as a rowid table, with rows.
    path = tmp_path / "old.db"
    open_store(str(path)).close()
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE links; CREATE TABLE links (vehicle TEXT NOT NULL, agent TEXT NOT NULL, "
        "seq BIGINT NOT NULL, hash TEXT NOT NULL, prev TEXT, state TEXT NOT NULL, "
        "received_ms BIGINT NOT NULL, PRIMARY KEY (vehicle, agent, seq));"
        "DELETE FROM migrations WHERE name = '013_links_without_rowid';")
    rows = [(V1, "a1", 1, "1" * 64, "0" * 64, "stored", T0),
            (V1, "a1", 2, "2" * 64, None, "rejected", T0 + 1)]
    conn.executemany("INSERT INTO links VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    store = open_store(str(path))
    try:
        assert store._read("SELECT * FROM links ORDER BY seq") == rows
        (sql,) = store._read("SELECT sql FROM sqlite_master WHERE name = 'links'")[0]
        assert "WITHOUT ROWID" in sql
    finally:
        store.close()


def test_the_speed_rows_index_parses_no_json(store: Store) -> None:
    # Migration 021: PostgreSQL reads an expression column from the row anyway, so its index of
    # speed rows holds none (no JSON parsed per speed row stored); migration 022: SQLite's holds
    # the kmh column kept at insert (it reads the km/h from its index), no JSON expression.
    # Either way the speed rows are read back in time order.
    if store.dialect == "postgresql":
        [(definition,)] = store._read(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_records_speed' "
            "AND schemaname = current_schema()")
        assert "jsonb" not in definition
        assert "(vehicle, ts_ms) WHERE (kind = 'speed'::text)" in definition
    else:
        [(sql,)] = store._read("SELECT sql FROM sqlite_master WHERE name = 'idx_records_speed'")
        assert "(vehicle, ts_ms, kmh) WHERE kind = 'speed'" in sql
    rows = [record_row(speed(V1, "a1", seq, at_s=10 - seq, kmh=float(seq)), T0) for seq in (1, 2, 3)]
    assert store.put(rows) == 3
    assert store.speed_columns(V1, "speed", 0, 1 << 62) == ([T0 + 7000, T0 + 8000, T0 + 9000],
                                                           [3.0, 2.0, 1.0])


def test_apply_with_no_rows_takes_no_write_transaction(store: Store) -> None:
    def no_transaction() -> None:
        raise AssertionError("a write transaction for nothing")

    store._transaction = no_transaction  # type: ignore[assignment,method-assign]
    store.apply([("DELETE FROM integrity WHERE seq = ?", []), ("DELETE FROM links", [])])
