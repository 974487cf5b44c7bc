"""collector.findings on both store backends: evaluate_store, the findings table, filters, and an
open finding keeping its id as late records arrive."""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg

from collector import findings
from collector.store import PAGE, Store, open_store, record_row
from protocols.records import ms_to_ts, now_ms, ts_to_ms
from simulators.fleet import registry as fleet_registry
from tests.collector.rules.timeline import MIN
from tests.collector.rules.trip_fixture import REGISTRY, B, departed


def _records() -> list[dict[str, Any]]:
    """The SP trip of trip_fixture: stops away at 11:00Z, breakdown (carrier at fault) at
    11:01Z, moves on at 13:10Z (130 min: an infraction) to terminal B; agent and seq on each record."""
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=True)
    tl.moving("V1", 190 * MIN, 200 * MIN).at("V1", 199 * MIN, B)    # then stands at terminal B
    return [{**rec, "agent": "pi", "seq": n} for n, rec in enumerate(tl.records, start=1)]


def test_evaluate_save_and_load(store: Store) -> None:
    recs = _records()
    store.put([record_row(r, 0) for r in recs])
    as_of = ts_to_ms("2026-03-02T14:00:00Z")
    found = findings.evaluate_store(store, REGISTRY, as_of)
    assert [(f["rule"], f["severity"], f["start"], f["end"]) for f in found] == [
        ("trip.assistance_due", "deadline", "2026-03-02T11:00:00.000Z", None),
        ("trip.interruption", "infraction", "2026-03-02T11:00:00.000Z",
         "2026-03-02T13:10:00.000Z"),
    ]
    assert findings.load(store) == ([], None)
    findings.save(store, found, as_of)
    assert findings.load(store) == (found, as_of)
    assert findings.load(store, vehicle="V2") == ([], as_of)
    # since: still open, or ending at or after
    assert [f["rule"] for f in findings.load(store, since_ms=ts_to_ms(
        "2026-03-02T13:10:00.001Z"))[0]] == ["trip.assistance_due"]


def test_an_open_interruption_keeps_its_id_when_the_backlog_arrives(store: Store) -> None:
    recs = _records()
    stop_at = ts_to_ms("2026-03-02T11:00:00Z")
    early = [r for r in recs if ts_to_ms(r["ts"]) <= stop_at]
    store.put([record_row(r, 0) for r in early])
    # 12:00Z: stopped for 60 min, no incident known yet (still under 120 min): a report
    (first,) = findings.evaluate_store(store, REGISTRY, ts_to_ms("2026-03-02T12:00:00Z"))
    assert (first["rule"], first["severity"], first["end"]) == ("trip.interruption", "report",
                                                                None)
    store.put([record_row(r, 0) for r in recs])         # the rest, the earlier part again
    later = findings.evaluate_store(store, REGISTRY, ts_to_ms("2026-03-02T14:00:00Z"))
    same = next(f for f in later if f["rule"] == "trip.interruption")
    assert same["id"] == first["id"]
    assert (same["severity"], same["details"]["duration_min"]) == ("infraction", 130.0)


def _execute(url: str, sql: str) -> None:
    """Run one statement on the store's database behind the store's back."""
    if url.startswith("postgresql://"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())
    else:
        with closing(sqlite3.connect(url, isolation_level=None)) as conn:
            conn.execute(sql)


def test_a_database_whose_findings_tables_came_before_their_migration_keeps_them(
    store_url: str,
) -> None:
    """Before migration 004_findings, collector.findings created the two tables itself (same
    layout): such a database gets the migration recorded and keeps its findings."""
    first = open_store(store_url)
    recs = _records()
    first.put([record_row(r, 0) for r in recs])
    as_of = ts_to_ms("2026-03-02T14:00:00Z")
    found = findings.evaluate_store(first, REGISTRY, as_of)
    findings.save(first, found, as_of)
    first.close()
    _execute(store_url, "DELETE FROM migrations WHERE name = '004_findings'")
    again = open_store(store_url)
    try:
        assert again.migrate() == []            # applied while opening, just above
        assert findings.load(again) == (found, as_of)
        assert again.vehicle_ids() == ["V1"]
        assert again.newest_record_id() == len(recs)
    finally:
        again.close()
    reopened = open_store(store_url)
    try:
        assert reopened.migrate() == []
    finally:
        reopened.close()


def _free_from_another_thread(opened: Store) -> bool:
    """Whether another thread could take the store's write lock right now."""
    got: list[bool] = []

    def probe() -> None:
        got.append(opened._lock.acquire(blocking=False))
        if got[0]:
            opened._lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return got[0]


def test_a_long_read_holds_the_write_lock_only_page_by_page(store: Store) -> None:
    """The live evaluator re-reads the whole store while the ingest commits: between two pages of
    a read nothing is held, so a commit waits at most for one page."""
    store.put([record_row({**rec, "seq": n}, 0)
               for n, rec in enumerate(_records() * (PAGE // len(_records()) + 2), start=1)])
    reading = store.records("V1")
    next(reading)                               # suspended within its first page
    assert _free_from_another_thread(store)
    assert store.put([record_row({**_records()[0], "seq": 10**6}, 0)]) == 1
    assert sum(1 for _ in reading) > PAGE       # and it reads on


def test_on_sqlite_the_rules_read_while_the_writer_holds_its_lock(tmp_path: Path) -> None:
    """SQLite: reads go through their own read-only connection (WAL lets them run beside the
    writer), so a whole evaluation runs while the ingest holds the store's lock."""
    sqlite_store = open_store(str(tmp_path / "collector.db"))
    try:
        sqlite_store.put([record_row(r, 0) for r in _records()])
        held, release = threading.Event(), threading.Event()
        released: list[bool] = []

        def writer() -> None:                   # as the ingest's worker inside a commit
            with sqlite_store._lock:
                held.set()
                released.append(release.wait(60))   # 60 s: a guard against a hang only

        thread = threading.Thread(target=writer)
        thread.start()
        held.wait()
        found = findings.evaluate_store(sqlite_store, REGISTRY, ts_to_ms("2026-03-02T14:00:00Z"))
        release.set()
        thread.join()
        assert released == [True]               # evaluated before the writer let go
        assert [f["rule"] for f in found] == ["trip.assistance_due", "trip.interruption"]
    finally:
        sqlite_store.close()


def test_each_evaluation_notice_names_the_records_stored_since_the_last_one(
        store: Store, tmp_path: Path) -> None:
    """The records an evaluation announces (collector/findings.py, ``on_evaluated``) are those
    stored since the one before, each once — also when the evaluation took them from its state
    kept in memory (its second and third bursts) instead of reading them again."""
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet_registry(3)), encoding="utf-8")
    told: list[list[tuple[Any, Any, Any]]] = []
    live = findings.LiveFindings(store, path, on_evaluated=lambda rows, _as_of: told.append(
        sorted((str(v), str(a), int(s)) for v, a, s in rows)))
    start = now_ms() - 600_000
    bursts = []
    for burst in range(3):      # 3 buses, 20 s each, a record a second
        recs = [{"vehicle": f"SIM0000{bus}", "agent": f"pi-{bus}", "seq": 20 * burst + i + 1,
                 "ts": ms_to_ts(start + 1000 * (20 * burst + i)), "kind": "speed",
                 "kmh": 50.0} for bus in (1, 2, 3) for i in range(20)]
        store.put([record_row(r, 0) for r in recs])
        live.evaluate_now(store_only=False)
        bursts.append(sorted((r["vehicle"], r["agent"], r["seq"]) for r in recs))
    assert told == bursts
    assert live.evaluations == 3
