"""bench.longstore, the benchmarks' long store built from compacted days: each bus-day is a
valid day of its own bus (its names, its time, its chain), read back through the store.

Hand counts: bench.check's bus, local 05:45 to 06:05 (the 20 minutes around the morning's first
events, so that every column a copy renames or shifts is there: trip, line, driver, moving
odometer): a speed and a position record each second (2 × 20 × 60 = 2,400) and the events — at
05:50 the driver's card (work) and the trip's start, at 06:00 the driver (drive): 3 records.
2,403 a bus-day, seq 1 to 2,403.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.longstore import DAY_MS, build
from collector.store import open_store
from protocols.chain import GENESIS, record_hash
from protocols.records import ts_to_ms

PER_DAY = 2 * 20 * 60 + 3
SINCE_S, UNTIL_S = 5 * 3600 + 45 * 60, 6 * 3600 + 5 * 60  # 05:45, 06:05 local


def test_a_long_store_of_compacted_days(tmp_path: Path) -> None:
    made = build(str(tmp_path / "long.db"), buses=2, days=3, raw_days=1,
                 window_s=(SINCE_S, UNTIL_S))
    assert made.per_day == PER_DAY
    assert made.records == 2 * 3 * PER_DAY
    store = open_store(str(tmp_path / "long.db"))
    try:
        assert store.count() == 2 * 3 * PER_DAY
        assert int(store._read("SELECT count(*) FROM records")[0][0]) == 2 * PER_DAY
        assert store.vehicle_ids() == ["BUS00", "BUS01"]
        odometer_before = 0
        for day in range(3):
            start = made.first_ms + day * DAY_MS
            recs = [orjson.loads(t) for t in store.records("BUS01", start, start + DAY_MS)]
            assert len(recs) == PER_DAY
            assert all(start + SINCE_S * 1000 <= ts_to_ms(r["ts"]) < start + UNTIL_S * 1000
                       for r in recs)
            assert {r["vehicle"] for r in recs} == {"BUS01"}
            assert {r["agent"] for r in recs} == {f"pi-BUS01-d{day}"}
            assert [r["seq"] for r in recs] == list(range(1, PER_DAY + 1))
            assert recs[0]["prev"] == GENESIS
            assert all(recs[i]["prev"] == record_hash(recs[i - 1]) for i in range(1, len(recs)))
            assert [r["trip"] for r in recs if r["kind"] == "trip"] == [f"T01-{day}-0"]
            assert {r["line"] for r in recs if r["kind"] == "trip"} == {"L01"}
            assert {r["driver"] for r in recs if r["kind"] == "driver"} == {"C01A"}
            odometers = [r["odometer_m"] for r in recs if r["kind"] == "speed"]
            assert odometers == sorted(odometers)
            assert odometers[0] > odometer_before
            odometer_before = odometers[-1]
            # bench.check's line of bus 1 runs 0.01° south of bus 0's
            theirs = [orjson.loads(t) for t in store.records("BUS00", start, start + DAY_MS)]
            lat0 = [r["lat"] for r in theirs if r["kind"] == "position"]
            lat1 = [r["lat"] for r in recs if r["kind"] == "position"]
            assert [round(a - b, 5) for a, b in zip(lat0, lat1, strict=True)] == [0.01] * len(lat0)
    finally:
        store.close()
