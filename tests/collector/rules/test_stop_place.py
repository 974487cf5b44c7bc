"""A stop is placed where the bus stood, not at the last fix taken while it still moved
(docs/rules.md: a stop's place is the position at that moment)."""

from __future__ import annotations

from tests.collector.rules.timeline import MIN
from tests.collector.rules.trip_fixture import SP_DAY, A, P, TripLine

#: metres → degrees of longitude at latitude −23 (1° ≈ 102,470 m, as trip_fixture uses)
DEG = 1 / 102_470
APPROACH = (P[0], P[1] + 400 * DEG)      # 400 m short of Parada P (radius 150 m)
INSIDE = (P[0], P[1] + 50 * DEG)         # 50 m from it: inside
BEYOND = (P[0], P[1] - 1000 * DEG)       # 1 km past it: away from every point


def stop_near_p(approach: tuple[float, float], stood: tuple[float, float]) -> TripLine:
    """Trip T1 departs terminal A at 30 min at 80 km/h; the last fix while moving (GPS 40 km/h)
    is at ``approach`` at 59 min; the bus stops at 60 min, a fix without speed at 61 min is where
    it stands (``stood``), and it moves on at 90 min: a stop of 30 min (≥ 15)."""
    tl = TripLine(SP_DAY)
    tl.slot("V1", 0, 1, "C1", "work").speed("V1", 0, 0).at("V1", 0, A)
    tl.start_trip("V1", 1 * MIN, "SP-R", 30 * MIN)
    tl.moving("V1", 30 * MIN, 60 * MIN)
    tl.at("V1", 59 * MIN, approach, kmh=40)
    tl.at("V1", 61 * MIN, stood)
    tl.moving("V1", 90 * MIN, 100 * MIN)
    return tl


def test_a_stop_inside_a_paradas_radius_is_not_an_interruption() -> None:
    # approach fix 400 m out (outside the 150 m), stood 50 m from P (inside): an approved point
    assert stop_near_p(APPROACH, INSIDE).findings_of("trip.interruption") == []


def test_a_stop_beyond_the_parada_is_placed_where_it_stood() -> None:
    # approach fix inside P while still moving, stood 1 km past it: an interruption of 30 min
    # (a report in SP: ≤ 120 min) at the place it stood, 60:00 → 90:00
    (f,) = stop_near_p(INSIDE, BEYOND).findings_of("trip.interruption")
    assert (f["start"], f["end"]) == ("2026-03-02T11:00:00.000Z", "2026-03-02T11:30:00.000Z")
    assert (f["details"]["lat"], f["details"]["lon"]) == BEYOND
    assert f["severity"] == "report"
