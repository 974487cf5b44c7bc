"""Passengers who board before ``trip start`` are on board for the trip (docs/rules.md: on board is
the running sum of boarded − alighted, never below 0, from the vehicle's previous ``trip end``).

Every shipped scenario boards at the terminal before the driver starts the trip; the replay
test below derives each scenario's passengers, passenger-km and occupancy index from the
scenario file's own door counts and the route, and holds the engine to them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from collector import registry as fleet
from collector.rules import evaluate
from simulators.scenario import shipped
from simulators.scenario.load import load
from simulators.scenario.render import render
from simulators.scenario.timeline import build
from tests.collector.rules.timeline import MIN, PROFILES
from tests.collector.rules.trip_fixture import A, TripLine


def tiete(boarded: int, seats_line: str = "SP-R") -> TripLine:
    """V1 (40 seats) stands at terminal A; ``boarded`` board at 5 min; the trip starts at 20 min,
    departs at 30 min and drives 80 km/h until 60 min."""
    tl = TripLine("2026-03-02T10:00:00.000Z")
    tl.slot("V1", 0, 1, "C1", "work").speed("V1", 0, 0).at("V1", 0, A)
    tl.door("V1", 5 * MIN, boarded=boarded)
    tl.start_trip("V1", 20 * MIN, seats_line, 30 * MIN)
    tl.moving("V1", 30 * MIN, 60 * MIN)
    return tl


def test_boarding_before_trip_start_counts() -> None:
    # The new user's trial: more passengers board at the terminal than the bus has seats, then
    # the driver starts the trip. V1 has 40 seats (SP rodoviário: no standing), 52 board:
    # standing = 52 − 40 = 12, from the trip start (20 min) to the end of the data, open.
    tl = tiete(52)
    (f,) = tl.findings_of("occupancy.standing")
    assert (f["start"], f["end"], f["trip"]) == ("2026-03-02T10:20:00.000Z", None, "T1")
    assert (f["details"]["peak_on_board"], f["details"]["standing"]) == (52, 12)


def test_passenger_km_from_before_the_start() -> None:
    # 30 on board from the trip start; moving 80 km/h from 30 to 60 min = 40 km: 30 × 40 =
    # 1200 passenger-km; seat-km 40 seats × 100 km = 4000; index 0.3. The month (March 2026,
    # São Paulo) is over at 1 April 03:00 UTC; the trip is still running, counted so far.
    tl = tiete(30)
    (f,) = tl.findings_of("occupancy.index", as_of_ms=31 * 24 * 60 * MIN)
    assert f["details"]["passenger_km"] == 1200.0
    assert f["details"]["index"] == 0.3
    assert f["details"]["passengers"] == 30


def test_on_board_restarts_at_the_previous_trip_end() -> None:
    # Trip T0 ends with 25 on board (nobody counted off: everyone alights at the end); 10 board
    # for T1 before it starts: T1 starts with 10, not 35. 10 × 40 km = 400 passenger-km of T1;
    # T0 (0–4 min, not moving) adds 0. Two trips in the month: seat-km 2 × 4000 = 8000;
    # index 400 / 8000 = 0.05.
    tl = TripLine("2026-03-02T10:00:00.000Z")
    tl.slot("V1", 0, 1, "C1", "work").speed("V1", 0, 0).at("V1", 0, A)
    tl.start_trip("V1", 1 * MIN, "SP-R", None, trip="T0")
    tl.door("V1", 2 * MIN, boarded=25)
    tl.add("trip", "V1", 4 * MIN, event="end", trip="T0", line="SP-R")
    tl.door("V1", 6 * MIN, boarded=12, alighted=2)
    tl.start_trip("V1", 20 * MIN, "SP-R", 30 * MIN)
    tl.moving("V1", 30 * MIN, 60 * MIN)
    (f,) = tl.findings_of("occupancy.index", as_of_ms=31 * 24 * 60 * MIN)
    assert (f["details"]["trips"], f["details"]["passenger_km"]) == (2, 400.0)
    assert f["details"]["passengers"] == 25 + 10
    assert f["details"]["index"] == 0.05


def _expected(path: Path) -> tuple[int, float, float, str, int]:
    """From the scenario file alone: (passengers transported, passenger-km, index, line, month's
    end as a local-midnight ms). On board is the running sum of the stops' door counts from the
    start (no trip end before), reset at the trip end; each leg of the trip carries what is on
    board when it leaves, over the route's length of the leg."""
    sc = load(path)
    tl = build(sc)
    on_board = passengers = 0
    in_trip = False
    passenger_km = 0.0
    for i, span in enumerate(tl.spans):
        stop = span.stop
        if stop.trip_end is not None:       # at arrival + 5 s, before the doors open
            in_trip, on_board = False, 0
        boarded = sum(d.boarded for d in stop.doors)
        on_board = max(0, on_board + boarded - sum(d.alighted for d in stop.doors))
        if stop.trip_start is not None:
            in_trip = True
            passengers += on_board
        elif in_trip:
            passengers += boarded
        if in_trip and i + 1 < len(tl.spans):
            passenger_km += on_board * (tl.spans[i + 1].route_m - span.route_m) / 1000
    registry = fleet.load(sc.registry_path)
    line = registry.lines[sc.line["id"]]
    seats = registry.vehicles[sc.vehicle].seats
    tz = PROFILES[line.profile].tz
    local = datetime.fromtimestamp(sc.start_ms / 1000, tz)
    month_end = datetime(local.year + local.month // 12, local.month % 12 + 1, 1, tzinfo=tz)
    return (passengers, passenger_km, passenger_km / (seats * line.length_km), line.id,
            int(month_end.timestamp() * 1000))


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.stem)
def test_every_shipped_scenario_carries_its_passengers(path: Path) -> None:
    passengers, passenger_km, index, line, month_end = _expected(path)
    assert passengers > 0
    sc = load(path)
    registry = fleet.load(sc.registry_path)
    found = evaluate(registry, PROFILES, render(sc), as_of_ms=month_end)
    (f,) = [f for f in found if f["rule"] == "occupancy.index" and f["line"] == line]
    assert f["details"]["trips"] == 1
    assert f["details"]["passengers"] == passengers
    # the engine integrates the 1 Hz speed samples; the route's length of each leg is the
    # scenario's own integral of the same speeds (legs snapped onto a stop differ by < 1 m):
    # within 0.1 %
    assert f["details"]["passenger_km"] == pytest.approx(passenger_km, rel=0.001)
    assert f["details"]["index"] == pytest.approx(index, abs=0.001)
