"""``frota collector stats``: monthly trips, passengers transported (BA 35 II), passenger-km,
seat-km, index and the timetable's scheduled and run trips per line, worked out by hand."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from collector.store import open_store, record_row
from protocols.records import ms_to_ts, ts_to_ms, validate
from tests.services import PROJECT

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
MAY_1 = ts_to_ms("2000-05-01T03:00:00Z")      # 2000-05-01 00:00 in Bahia (UTC−3)
REGISTRY = {
    "lines": [
        {"id": "BA-T", "profile": "BA", "service": "rodoviario", "length_km": 100,
         "timetable": {"service_order": "OS 9/2000", "valid_from": "2000-05-01",
                       "valid_until": "2000-05-03",
                       "departures": [{"time": "08:00", "weekdays": ["mon", "tue"]},
                                      {"time": "17:00", "weekdays": ["mon", "tue"]}]}},
        {"id": "BA-X", "profile": "BA", "service": "rodoviario", "length_km": 50},
    ],
    "vehicles": [{"id": "V1", "seats": 40}],
}


def _records() -> list[dict[str, Any]]:
    """Three trips of BA-T (8:00 and 17:00 on 1 May, 8:00 on 2 May; 17:00 on 2 May not run):
    20, 10 and 0 passengers board before the start; each drives 80 km/h for 30 min = 40 km."""
    out: list[dict[str, Any]] = []
    seq = 0

    def rec(ms: int, kind: str, **fields: Any) -> None:
        nonlocal seq
        seq += 1
        out.append(validate({"vehicle": "V1", "ts": ms_to_ts(ms), "kind": kind, "agent": "a",
                             "seq": seq, **fields}))

    rec(MAY_1, "speed", kmh=0)
    for n, (dep, boarded) in enumerate(((MAY_1 + 8 * HOUR, 20), (MAY_1 + 17 * HOUR, 10),
                                        (MAY_1 + DAY + 8 * HOUR, 0))):
        trip = f"T{n}"
        if boarded:
            rec(dep - 10 * MIN, "door", door=1, open=False, boarded=boarded, alighted=0)
        rec(dep - 2 * MIN, "trip", event="start", trip=trip, line="BA-T",
            scheduled=ms_to_ts(dep))
        for t in range(0, 30 * MIN, 5 * MIN):
            rec(dep + t, "speed", kmh=80)
        rec(dep + 30 * MIN, "speed", kmh=0)
        rec(dep + 31 * MIN, "trip", event="end", trip=trip, line="BA-T")
    return out


def test_stats_of_a_month(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = open_store(str(db))
    store.put([record_row(r, MAY_1) for r in _records()])
    store.close()
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(REGISTRY))

    def stats(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "frota", "collector", "stats", "--db",
                               str(db), "--registry", str(registry), "--month", "2000-05",
                               *extra], cwd=PROJECT, capture_output=True, text=True,
                              timeout=120, check=False)

    done = stats()
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    # passenger-km 20 × 40 + 10 × 40 + 0 = 1200; seat-km 3 trips × 40 seats × 100 km = 12,000;
    # index 0.1; departures 8:00 and 17:00 on Mon 1 and Tue 2 May = 4, run 3
    assert rows == [
        {"month": "2000-05", "line": "BA-T", "profile": "BA", "trips": 3, "passengers": 30,
         "passenger_km": 1200.0, "seat_km": 12000.0, "index": 0.1, "scheduled": 4, "run": 3,
         "complete": True},
        {"month": "2000-05", "line": "BA-X", "profile": "BA", "trips": 0, "passengers": 0,
         "passenger_km": 0.0, "seat_km": 0.0, "index": None, "scheduled": None, "run": None,
         "complete": True},
    ]
    as_csv = stats("--line", "BA-T", "--csv")
    assert as_csv.returncode == 0, as_csv.stderr
    (row,) = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert (row["trips"], row["passengers"], row["run"]) == ("3", "30", "3")
    april = stats("--month", "2000-04")
    assert april.returncode == 0
    bad = stats("--line", "NOPE")
    assert (bad.returncode, bad.stderr.count("\n")) == (1, 1)
    assert "unknown line 'NOPE'" in bad.stderr
    month = subprocess.run([sys.executable, "-m", "frota", "collector", "stats", "--db", str(db),
                            "--registry", str(registry), "--month", "May"], cwd=PROJECT,
                           capture_output=True, text=True, timeout=120, check=False)
    assert month.returncode == 1
    assert "month 'May' is not YYYY-MM" in month.stderr
