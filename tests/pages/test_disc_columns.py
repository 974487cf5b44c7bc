"""The pages read a compacted day from its columns (collector/disc_columns.py) and see what they
saw in its rows: the same speeds, the same events (less a ``prev`` the codec dropped), the same
*Disco do dia* — on the scenario store's three vehicle-days, compacted by the collector's job."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path
from typing import Any

import orjson

from collector import compaction, disc_columns, store_disc
from collector import registry as fleet
from collector.rules.profile import load_profiles
from collector.store import Store, open_store
from collector.web import dayview, svg
from collector.web.localtime import Day
from protocols.records import ts_to_ms
from tests.pages.fleet import AS_OF

DAYS = (("FRT1A01", date(2026, 3, 2)), ("FRT1A02", date(2026, 3, 2)),
        ("FRT2B02", date(2026, 3, 3)))


def _reads(store: Store, registry: fleet.Registry) -> list[Any]:
    out: list[Any] = []
    for vehicle, when in DAYS:
        day = Day.of(when, load_profiles()["SP"].tz)
        for kind in ("speed", "position"):
            out.append(store.speeds(vehicle, kind, day.lo_ms, day.hi_ms))
            out.append(store.speeds(vehicle, kind, day.lo_ms + 3_600_000, day.hi_ms - 60_000))
        out.append([_no_prev(orjson.loads(t))
                    for t in store.events(vehicle, day.lo_ms, day.hi_ms, exact=False)])
        d = dayview.vehicle_day(store, registry, vehicle, day, 5.0)
        out.append((svg.disc(d), svg.timeline(d)))
    return out


def test_a_compacted_day_reads_as_its_rows(tmp_path: Path,
                                           scenario_store: tuple[Path, Path]) -> None:
    db = tmp_path / "collector.db"
    shutil.copy(scenario_store[0], db)
    registry = fleet.load(scenario_store[1])
    store = open_store(str(db))
    try:
        before = _reads(store, registry)
        assert len(before[0]) > 5000            # sp-clean: a trip at 1 Hz
        done = compaction.compact(store, registry, load_profiles(), now_ms=AS_OF, pause_s=0)
        assert {(d.vehicle, str(d.day)) for d in done} >= {(v, str(w)) for v, w in DAYS}
        assert store._read("SELECT count(*) FROM records WHERE kind = 'speed'")[0][0] == 0
        disc_columns.clear_cache()
        after = _reads(store, registry)
        assert after == before
        # and the columns are what the day decoded whole says
        for day in store_disc.days(store, "FRT1A01"):
            cols = disc_columns.day_columns(store, day.vehicle, day.day)
            assert cols is not None
            whole = [orjson.loads(r.text) for r in store_disc.day_rows(store, day)]
            assert cols.speeds("speed", day.day_start_ms, day.day_end_ms) == [
                (ts_to_ms(r["ts"]), float(r["kmh"])) for r in whole if r["kind"] == "speed"]
            assert [_no_prev(r) for r in cols.events(day.day_start_ms, day.day_end_ms)] == [
                _no_prev(r) for r in whole if r["kind"] not in ("speed", "position")]
    finally:
        store.close()


def _no_prev(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k != "prev"}
