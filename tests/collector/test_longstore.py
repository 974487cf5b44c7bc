"""bench.longstore, the benchmarks' long store built from compacted days: each bus-day is a
valid day of its own bus (its names, its time, its chain), read back through the store.

Hand counts: bench.check's bus, from local midnight, 7 hours: a speed and a position record each
second (2 × 7 × 3600 = 50,400) and the morning's events before 07:00 — at 05:50 the driver's
card (work) and the trip's start, at 06:00 the driver (drive): 3 records. 50,403 a bus-day.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.longstore import DAY_MS, build
from collector.store import open_store
from protocols.chain import GENESIS, record_hash
from protocols.records import ts_to_ms

PER_DAY = 2 * 7 * 3600 + 3


def test_a_long_store_of_compacted_days(tmp_path: Path) -> None:
    made = build(str(tmp_path / "long.db"), buses=2, days=3, raw_days=1, hours=7)
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
            assert all(start <= ts_to_ms(r["ts"]) < start + 7 * 3_600_000 for r in recs)
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
