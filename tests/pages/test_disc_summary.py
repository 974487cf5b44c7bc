"""The *Disco do dia* of a compacted day from the summary the compaction job writes beside it
(collector/disc_summary.py) is the page its records give: the same figures, events, driver at
midnight and SVG as read from the day's rows before compaction — on the scenario store's
vehicle-days and the days after them (whose driver at midnight is in the compacted day); a late
record that reopens the day takes the summary with it, and the next run writes it again."""

from __future__ import annotations

import shutil
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from collector import compaction, disc_columns, disc_summary, store_disc
from collector import registry as fleet
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from collector.web import dayview, svg
from collector.web.localtime import Day
from protocols.records import make_record, ms_to_ts
from tests.pages.fleet import AS_OF

DAYS = (("FRT1A01", date(2026, 3, 2)), ("FRT1A02", date(2026, 3, 2)),
        ("FRT2B02", date(2026, 3, 3)))
VIEWS = [(v, w + timedelta(days=k)) for v, w in DAYS for k in (0, 1)]
STOP_KMH = load_profiles()["SP"].stop_kmh     # the pages' (Web.stop_kmh)


def _page(store: Store, registry: fleet.Registry, vehicle: str, when: date,
          stop_kmh: float = STOP_KMH) -> Any:
    day = Day.of(when, load_profiles()["SP"].tz)
    d = dayview.vehicle_day(store, registry, vehicle, day, stop_kmh)
    events = [(e.ms, e.kind, e.text, e.who) for e in d.events]
    return (d.minutes, d.distance, d.max_kmh, d.max_at_ms, d.moving_ms, d.distance_km,
            d.samples, d.source, events, d.trips, d.first_driver,
            [e.ms for e in d.driver_changes], svg.disc(d), svg.timeline(d))


def _no_columns(*_: Any) -> Any:
    raise AssertionError("a summarized day's columns were decoded")


def test_the_disc_from_the_summary_is_the_disc_of_the_records(
        tmp_path: Path, scenario_store: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "collector.db"
    shutil.copy(scenario_store[0], db)
    registry = fleet.load(scenario_store[1])
    store = open_store(str(db))
    try:
        # FRT1A01 at 23:30 local on 2 March: a driver card in slot 1 (the driver at midnight
        # of the 3rd) and, at 19:00, the registrador's compartment opened
        extra = [make_record("device", "FRT1A01", "2026-03-02T22:00:00.000Z", device="registrador",
                             status="compartment_open"),
                 make_record("driver", "FRT1A01", "2026-03-03T02:30:00.000Z", slot=1,
                             driver="04512345678", activity="rest")]
        store.put([record_row({**rec, "agent": "late-reg", "seq": n + 1}, AS_OF)
                   for n, rec in enumerate(extra)])
        before = {view: _page(store, registry, *view) for view in VIEWS}
        slower = {view: _page(store, registry, *view, stop_kmh=5.0) for view in DAYS}
        assert before[DAYS[0]][6] > 5000              # sp-clean: a trip at 1 Hz
        assert before[("FRT1A01", date(2026, 3, 3))][10] is not None    # the driver at midnight
        assert "abertura" in before[DAYS[0]][-2]
        compaction.compact(store, registry, load_profiles(), now_ms=AS_OF, pause_s=0)
        for vehicle, when in DAYS:
            assert disc_summary.read(store, vehicle, when.isoformat()) is not None
        disc_columns.clear_cache()
        store_disc.clear_cache()
        with monkeypatch.context() as m:    # the compacted days are read from their summaries
            m.setattr(disc_columns, "day_columns", _no_columns)
            m.setattr(store_disc, "decode_rows", _no_columns)
            after = {view: _page(store, registry, *view) for view in VIEWS}
        assert after == before
        # another stop speed than the summary's: read from the columns, the same again
        assert {view: _page(store, registry, *view, stop_kmh=5.0) for view in DAYS} == slower
    finally:
        store.close()


def test_a_late_record_takes_the_summary_and_the_next_run_writes_it_again(
        tmp_path: Path, scenario_store: tuple[Path, Path]) -> None:
    db = tmp_path / "collector.db"
    shutil.copy(scenario_store[0], db)
    registry = fleet.load(scenario_store[1])
    store = open_store(str(db))
    vehicle, when = DAYS[0]
    try:
        compaction.compact(store, registry, load_profiles(), now_ms=AS_OF, pause_s=0)
        assert disc_summary.read(store, vehicle, when.isoformat()) is not None
        day = Day.of(when, load_profiles()["SP"].tz)
        # a late GPS position at 03:00 local, of an operator-free agent of its own
        late = {**make_record("position", vehicle, ms_to_ts(day.lo_ms + 3 * 3_600_000),
                              lat=-23.5, lon=-46.6, kmh=77.0), "agent": "late-gps", "seq": 1}
        store.put([record_row(late, AS_OF)])
        assert disc_summary.read(store, vehicle, when.isoformat()) is None
        reopened = _page(store, registry, vehicle, when)
        compaction.compact(store, registry, load_profiles(), now_ms=AS_OF, pause_s=0)
        assert disc_summary.read(store, vehicle, when.isoformat()) is not None
        assert _page(store, registry, vehicle, when) == reopened
    finally:
        store.close()


def test_a_minute_at_exactly_the_stop_speed_moves_in_the_summary_too(tmp_path: Path) -> None:
    """By hand (docs/rules.md: moving is a speed at or above stop_kmh): 2 March 2026 local, a
    speed sample each 10 s from 10:00 to 10:02 at exactly the stop speed, then one at 10:02 at
    0 km/h: minutes 600 and 601 moving (their top is the stop speed), 602 stopped; 12 samples at
    the stop speed moving 10 s each, 120 s; 120 s x stop km/h of distance."""
    store = open_store(str(tmp_path / "collector.db"))
    tz = load_profiles()["SP"].tz
    day = Day.of(date(2026, 3, 2), tz)
    t0 = day.lo_ms + 600 * 60_000
    speeds = [STOP_KMH] * 12 + [0.0]
    rows = [record_row({**make_record("speed", "V1", ms_to_ts(t0 + 10_000 * n), kmh=kmh),
                        "agent": "a", "seq": n + 1}, t0) for n, kmh in enumerate(speeds)]
    try:
        store.put(rows)
        registry = fleet.Registry((), (), ())
        from_rows = dayview.vehicle_day(store, registry, "V1", day, STOP_KMH)
        compaction.compact(store, None, load_profiles(), now_ms=AS_OF, pause_s=0)
        assert disc_summary.read(store, "V1", "2026-03-02") is not None
        d = dayview.vehicle_day(store, registry, "V1", day, STOP_KMH)
        assert d.minutes[600:603] == [(STOP_KMH, STOP_KMH, True), (STOP_KMH, STOP_KMH, True),
                                      (0.0, 0.0, False)]
        assert d.moving_ms == 120_000
        assert d.distance_km == STOP_KMH * 120_000 / 3_600_000
        assert (d.minutes, d.moving_ms, d.distance, svg.disc(d)) == \
            (from_rows.minutes, from_rows.moving_ms, from_rows.distance, svg.disc(from_rows))
    finally:
        store.close()
