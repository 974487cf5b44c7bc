"""The *Disco do dia* of a day still as rows, from the per-minute summary the ingest keeps
(collector/speed_minutes.py, migration 020): the page it draws is the page of the rows — the same
figures to the last bit, events, SVGs — on the scenario store's days, after records arrive in
order, late, twice, at one instant, in a day reopened from compaction; a vehicle whose rows
predate the summary is read from its rows until its minutes are rebuilt. Both backends."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from collector import compaction, speed_minutes
from collector import registry as fleet
from collector.rules.profile import load_profiles
from collector.store import RECORD_COLUMNS, Store, open_store, record_row
from collector.web import dayview, svg
from collector.web.localtime import Day
from protocols.records import make_record, ms_to_ts
from tests.pages.fleet import AS_OF

STOP_KMH = load_profiles()["SP"].stop_kmh     # the pages' (Web.stop_kmh)
SP = ZoneInfo("America/Sao_Paulo")
BUS = "ABC1D23"
DAY = Day.of(date(2026, 3, 2), SP)            # local midnight 03:00Z
T0 = DAY.lo_ms
REGISTRY = fleet.Registry((), (), ())


def _page(store: Store, registry: fleet.Registry, vehicle: str, day: Day,
          stop_kmh: float = STOP_KMH) -> Any:
    d = dayview.vehicle_day(store, registry, vehicle, day, stop_kmh)
    return (d.minutes, d.distance, d.max_kmh, d.max_at_ms, d.moving_ms, d.distance_km,
            d.samples, d.source, [(e.ms, e.kind, e.text) for e in d.events], d.trips,
            d.first_driver, svg.disc(d), svg.timeline(d))


def _both(store: Store, registry: fleet.Registry, vehicle: str, day: Day, monkeypatch: pytest.MonkeyPatch,
          stop_kmh: float = STOP_KMH) -> Any:
    """The page from the minutes (which must be there) and from the rows; they must agree."""
    assert speed_minutes.read_day(store, vehicle, day.lo_ms, day.hi_ms, stop_kmh) is not None
    summed = _page(store, registry, vehicle, day, stop_kmh)
    with monkeypatch.context() as m:
        m.setattr(speed_minutes, "read_day", lambda *_: None)
        rows = _page(store, registry, vehicle, day, stop_kmh)
    assert summed == rows
    return summed


def test_the_scenario_days_from_their_minutes(
        tmp_path: Path, scenario_store: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "collector.db"
    shutil.copy(scenario_store[0], db)
    registry = fleet.load(scenario_store[1])
    store = open_store(str(db))
    try:
        for vehicle, when in (("FRT1A01", date(2026, 3, 2)), ("FRT1A02", date(2026, 3, 2)),
                              ("FRT2B02", date(2026, 3, 3))):
            page = _both(store, registry, vehicle, Day.of(when, SP), monkeypatch)
            assert page[6] > 5000                           # a trip at 1 Hz
        clean = _both(store, registry, "FRT1A01", Day.of(date(2026, 3, 2), SP), monkeypatch)
        assert 86 - 1.5 <= clean[2] <= 86 + 1.5             # sp-clean's peak (tests/pages)
        # another stop speed than the minutes': read from the rows
        assert speed_minutes.read_day(store, "FRT1A01", DAY.lo_ms, DAY.hi_ms, 5.0) is None
    finally:
        store.close()


def _speed(ms: int, kmh: float, seq: int, agent: str = "a1") -> tuple[Any, ...]:
    rec = make_record("speed", BUS, ms_to_ts(ms), kmh=kmh, odometer_m=seq, ignition=True)
    return record_row({**rec, "agent": agent, "seq": seq}, AS_OF)


def test_minutes_follow_records_in_order_late_resent_and_reopened(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = REGISTRY
    # hand-worked: 36 km/h for 10 s then 72 km/h for 5 s (a sample each second), then a gap
    first = [_speed(T0 + 1000 * k, 36.0, k + 1) for k in range(10)] + \
        [_speed(T0 + 10_000 + 1000 * k, 72.0, k + 11) for k in range(6)]
    store.put(first[:7])
    store.put(first[7:])                                  # in order, a second batch
    page = _both(store, registry, BUS, DAY, monkeypatch)
    # 36 km/h x 10 s = 100 m, 72 km/h x 5 s = 100 m (the last sample holds nothing yet)
    assert page[5] == pytest.approx(0.2, abs=1e-12)
    assert page[4] == 15_000                              # moving: 15 steps of 1 s at >= 3 km/h
    assert (page[2], page[3], page[6]) == (72.0, T0 + 10_000, 16)
    # the next minute, in order; a gap of 2 min (counts nothing), then a stop
    store.put([_speed(T0 + 61_000 + 1000 * k, 50.0 + k, 17 + k) for k in range(50)])
    store.put([_speed(T0 + 300_000, 0.0, 67), _speed(T0 + 301_000, 0.0, 68)])
    _both(store, registry, BUS, DAY, monkeypatch)
    # late: a sample between two stored ones, one at an instant already stored, and the same
    # batch again (nothing new: nothing counted twice)
    late = [_speed(T0 + 15_500, 120.0, 69), _speed(T0 + 61_000, 49.0, 70)]
    store.put(late)
    store.put(late)
    page = _both(store, registry, BUS, DAY, monkeypatch)
    assert (page[2], page[3]) == (120.0, T0 + 15_500)
    # the next local day, and a sample of the day before at 23:59:59 (its step into the next
    # day counts in neither day's distance)
    nxt = Day.of(date(2026, 3, 3), SP)
    store.put([_speed(nxt.lo_ms - 1000, 40.0, 71), _speed(nxt.lo_ms, 40.0, 72),
               _speed(nxt.lo_ms + 1000, 40.0, 73)])
    page = _both(store, registry, BUS, nxt, monkeypatch)
    assert page[5] == pytest.approx(40 * 1000 / 3_600_000, abs=1e-12)
    _both(store, registry, BUS, DAY, monkeypatch)
    # the minutes as kept equal the minutes rebuilt from the rows
    sql = "SELECT * FROM speed_minutes ORDER BY vehicle, kind, minute_ms"
    kept = store._read(sql)
    speed_minutes.rebuild(store, BUS, STOP_KMH)
    assert store._read(sql) == kept
    # compacted: its minutes go with its rows; a late record reopens it: minutes from the rows
    compaction.compact(store, None, load_profiles(), now_ms=nxt.hi_ms + 3 * 86_400_000,
                       after_days=2, pause_s=0, vehicles=[BUS])
    assert not store._read("SELECT 1 FROM speed_minutes WHERE minute_ms < ?", (nxt.hi_ms,))
    store.put([_speed(T0 + 200_000, 20.0, 1, agent="late")])
    page = _both(store, registry, BUS, DAY, monkeypatch)
    assert page[6] == 16 + 50 + 2 + 2 + 1 + 1              # every sample of the day, once


def test_a_store_from_before_the_minutes_reads_its_rows_until_rebuilt(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import collector.store_pg
    import collector.store_sqlite
    from collector.store_schema import MIGRATIONS

    before = [m.name for m in MIGRATIONS].index("020_speed_minutes")
    with monkeypatch.context() as m:      # the release before migration 020
        for module in (collector.store_sqlite, collector.store_pg):
            m.setattr(module, "MIGRATIONS", MIGRATIONS[:before])
        older = open_store(store_url)
        columns = RECORD_COLUMNS[:13]     # the columns records had then (022 added kmh)
        older.apply([(f"INSERT INTO records ({', '.join(columns)}) VALUES "
                      f"({', '.join('?' * len(columns))})",
                      [_speed(T0 + 1000 * k, 30.0, k + 1)[:13] for k in range(5)]),
                     (older.upsert_vehicle_sql, [(BUS, T0 + 4000, AS_OF, "a1")])])
        older.close()
    store = open_store(store_url)
    try:
        store.put([_speed(T0 + 5000 + 1000 * k, 30.0, k + 6) for k in range(5)])
        assert speed_minutes.pending(store) == [BUS]
        assert speed_minutes.read_day(store, BUS, DAY.lo_ms, DAY.hi_ms, STOP_KMH) is None
        assert _page(store, REGISTRY, BUS, DAY)[6] == 10           # from the rows
        assert compaction.rebuild_minutes(store, load_profiles()) == 1  # frota collector compact
        assert speed_minutes.pending(store) == []
        assert _both(store, REGISTRY, BUS, DAY, monkeypatch)[6] == 10
    finally:
        store.close()


def test_minutes_another_collector_holds_are_not_waited_for(
        store: Store, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL shared by collectors: a vehicle whose minutes another transaction is updating
    (its advisory lock held) is not waited for — its records are stored, the vehicle marked
    pending and its page read from the rows — until rebuilt. (SQLite has one writer.)"""
    import psycopg

    if store.dialect != "postgresql":
        return
    store.put([_speed(T0 + 1000 * k, 30.0, k + 1) for k in range(5)])
    with psycopg.connect(store_url) as other, other.transaction():
        other.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                      (speed_minutes.LOCK_CLASS, BUS))
        store.put([_speed(T0 + 5000 + 1000 * k, 30.0, k + 6) for k in range(5)])
    assert speed_minutes.pending(store) == [BUS]
    assert _page(store, REGISTRY, BUS, DAY)[6] == 10               # from the rows
    assert compaction.rebuild_minutes(store, load_profiles()) == 1
    assert _both(store, REGISTRY, BUS, DAY, monkeypatch)[6] == 10


def test_the_prune_takes_the_minutes_with_the_rows(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from collector import holds, retention

    nxt = Day.of(date(2026, 3, 3), SP)
    store.put([_speed(T0 + 1000 * k, 30.0, k + 1) for k in range(5)]
              + [_speed(nxt.lo_ms + 1000 * k, 30.0, k + 6) for k in range(5)])
    deleted, held = retention._prune_vehicle(store, BUS, nxt.lo_ms, 1000, False, 0)
    assert (deleted, held) == (5, 0)
    assert not store._read("SELECT 1 FROM speed_minutes WHERE minute_ms < ?", (nxt.lo_ms,))
    assert _both(store, REGISTRY, BUS, nxt, monkeypatch)[6] == 5
    # rows a hold keeps: the vehicle's minutes are rebuilt from the rows left
    later = Day.of(date(2026, 3, 4), SP)
    store.put([_speed(later.lo_ms + 1000 * k, 30.0, k + 11) for k in range(5)])
    holds.add(store, BUS, nxt.lo_ms, nxt.lo_ms + 2000, "inquérito", "maria", AS_OF)
    deleted, held = retention._prune_vehicle(store, BUS, later.lo_ms, 1000, False, 0)
    assert (deleted, held) == (3, 2)
    assert speed_minutes.pending(store) == [BUS]
    assert _page(store, REGISTRY, BUS, nxt)[6] == 2                # the held rows, read as rows
    assert compaction.rebuild_minutes(store, load_profiles()) == 1
    assert _both(store, REGISTRY, BUS, nxt, monkeypatch)[6] == 2
    assert _both(store, REGISTRY, BUS, later, monkeypatch)[6] == 5
