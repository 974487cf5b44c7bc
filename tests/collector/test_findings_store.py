"""collector.findings on both store backends: evaluate_store, the findings table, filters, and an
open finding keeping its id as late records arrive."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import psycopg

from collector import findings
from collector.store import Store, open_store, record_row
from protocols.records import ts_to_ms
from tests.collector.rules.timeline import MIN
from tests.collector.rules.trip_fixture import REGISTRY, B, departed
from tests.collector.test_store import store, store_url  # noqa: F401 - fixtures


def _records() -> list[dict[str, Any]]:
    """The SP trip of trip_fixture: stops away at 11:00Z, breakdown (carrier at fault) at
    11:01Z, moves on at 13:10Z (130 min: an infraction) to terminal B; agent and seq on each record."""
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=True)
    tl.moving("V1", 190 * MIN, 200 * MIN).at("V1", 199 * MIN, B)    # then stands at terminal B
    return [{**rec, "agent": "pi", "seq": n} for n, rec in enumerate(tl.records, start=1)]


def test_evaluate_save_and_load(store: Store) -> None:  # noqa: F811
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


def test_an_open_interruption_keeps_its_id_when_the_backlog_arrives(store: Store) -> None:  # noqa: F811
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
    store_url: str,  # noqa: F811
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
