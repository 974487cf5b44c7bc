"""schedule.*, occupancy.*, stops.unapproved and doors.open_while_moving built by hand at the
edges, per profile (docs/rules.md: BA 58 §1, TO 63 presence; BA 59, SP 15 §1 item 2 late departure;
SP 13 §4/37, BA 30, TO 59 standing; BA 60, TO 104 I c overload; BA 29, TO 53, SP 36 stops;
SP 71 II, TO 70 II doors; SP 15 §2 index)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.collector.rules.timeline import HOUR, MIN
from tests.collector.rules.trip_fixture import DAY, NEAR_A, OFF_A, A, P, TripLine, X, departed


def at_terminal(line: str, profile: str = "SP", *, arrive_min: float = 0, place: tuple[float, float] = A,
                vehicle: str = "V1") -> TripLine:
    """D1 at the wheel; the vehicle drives (60 km/h) until ``arrive_min`` and stands at ``place``
    from then; trip T1 starts at 22 min, scheduled at 30 min."""
    tl = TripLine(DAY[profile])
    tl.slot(vehicle, 0, 1, "C1", "work")
    arrive = round(arrive_min * MIN)
    if arrive > 0:
        tl.speed(vehicle, 0, 60).at(vehicle, 0, X)
    tl.at(vehicle, arrive - 1000 if arrive else 0, place).speed(vehicle, arrive, 0)
    tl.start_trip(vehicle, 22 * MIN, line, 30 * MIN)
    return tl


# ---- schedule.late_departure -------------------------------------------------------------
def test_late_departure_after_the_10_minute_tolerance() -> None:
    on_edge = at_terminal("SP-R").moving("V1", 40 * MIN, 50 * MIN)
    assert on_edge.findings_of("schedule.late_departure") == []
    late = at_terminal("SP-R").moving("V1", 40 * MIN + 1000, 50 * MIN)
    (f,) = late.findings_of("schedule.late_departure")
    assert (f["start"], f["end"]) == ("2026-03-02T10:30:00.000Z", "2026-03-02T10:40:01.000Z")
    assert f["details"]["late_min"] == 10.02
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 15 §1 item 2"]
    ba = at_terminal("BA-R", "BA").moving("V1", 41 * MIN, 50 * MIN)
    (g,) = ba.findings_of("schedule.late_departure", profile="BA")
    assert g["basis"] == ["Decreto BA 4.342/1995 art. 59", "Decreto BA 4.342/1995 art. 98 I b"]
    to = at_terminal("TO-R", "TO").moving("V1", 60 * MIN, 70 * MIN)
    assert to.findings_of("schedule.late_departure", profile="TO") == []


def test_a_trip_not_departed_yet_is_late_at_as_of() -> None:
    tl = at_terminal("SP-R")
    assert tl.findings_of("schedule.late_departure", as_of_ms=40 * MIN) == []
    (f,) = tl.findings_of("schedule.late_departure", as_of_ms=41 * MIN)
    assert (f["end"], f["details"]["late_min"], f["details"]["departure"]) == (None, 11.0, None)


# ---- schedule.presence -------------------------------------------------------------------
def test_presence_from_10_minutes_before_the_scheduled_time() -> None:
    early = at_terminal("BA-R", "BA", arrive_min=20).moving("V1", 30 * MIN, 40 * MIN)
    assert early.findings_of("schedule.presence", profile="BA") == []
    late = at_terminal("BA-R", "BA", arrive_min=21).moving("V1", 30 * MIN, 40 * MIN)
    (f,) = late.findings_of("schedule.presence", profile="BA")
    assert (f["start"], f["end"]) == ("2000-03-01T10:20:00.000Z", "2000-03-01T10:30:00.000Z")
    assert f["details"]["terminal"] == "Terminal A"
    assert f["details"]["arrived"] == "2000-03-01T10:21:00.000Z"
    assert f["basis"] == ["Decreto BA 4.342/1995 art. 58 §1"]


def test_presence_needs_the_terminal_radius() -> None:
    inside = at_terminal("TO-R", "TO", place=NEAR_A).moving("V1", 30 * MIN, 40 * MIN)
    assert inside.findings_of("schedule.presence", profile="TO") == []
    outside = at_terminal("TO-R", "TO", place=OFF_A).moving("V1", 30 * MIN, 40 * MIN)
    (f,) = outside.findings_of("schedule.presence", profile="TO")
    assert f["details"]["terminal"] is None
    assert f["basis"] == ["Regulamento TO art. 63"]


def test_presence_does_not_apply_to_to_semiurban_lines_nor_in_sp() -> None:
    semi = at_terminal("TO-S", "TO", arrive_min=25).moving("V1", 30 * MIN, 40 * MIN)
    assert semi.findings_of("schedule.presence", profile="TO") == []
    sp = at_terminal("SP-R", arrive_min=25).moving("V1", 30 * MIN, 40 * MIN)
    assert sp.findings_of("schedule.presence") == []


# ---- occupancy ---------------------------------------------------------------------------
def board(line: str, profile: str, n: int, vehicle: str = "V1") -> TripLine:
    """``n`` board at terminal A at 20 min; the trip departs at 30 and stops at X at 60; one
    passenger alights there at 65 min."""
    tl = departed(line, profile, vehicle, boarded=n)
    return tl.door(vehicle, 65 * MIN, alighted=1)


@pytest.mark.parametrize(("line", "profile", "vehicle", "allowed"), [
    ("SP-R", "SP", "V1", 40),        # standing not allowed: the seats
    ("SP-S", "SP", "V1", 50),        # SP suburbano: standing up to the capacity
    ("SP-S-NO", "SP", "V1", 40),     # the registry says no standing on this line
    ("BA-R", "BA", "V1", 40),
    ("BA-U", "BA", "V1", 50),        # BA urbano: standing allowed
    ("TO-R", "TO", "V1", 40),
    ("TO-S", "TO", "V3", 56),        # TO semi-urban: 40 seats + 40 % = 56 (capacity 60)
    ("TO-S", "TO", "V1", 50),        # … within the capacity (50)
    ("TO-R-STAND", "TO", "V1", 50),  # authorised by the registry: the capacity
])
def test_standing_at_its_edge(line: str, profile: str, vehicle: str, allowed: int) -> None:
    assert board(line, profile, allowed, vehicle).findings_of("occupancy.standing",
                                                               profile=profile) == []
    (f,) = board(line, profile, allowed + 1, vehicle).findings_of("occupancy.standing",
                                                                   profile=profile)
    assert (f["start"], f["details"]["peak_on_board"], f["details"]["limit"]) == \
        (DAY[profile][:11] + "10:20:00.000Z", allowed + 1, allowed)
    assert f["end"] == DAY[profile][:11] + "11:05:00.000Z"  # one alights: back to the limit
    assert f["details"]["standing"] == allowed + 1 - 40


def test_overload_counts_the_excess_in_ba_and_to_only() -> None:
    (f,) = board("BA-U", "BA", 53).findings_of("occupancy.overload", profile="BA")
    assert (f["details"]["excess"], f["details"]["capacity"]) == (3, 50)
    assert f["end"] is None                                 # 52 still above 50
    assert f["basis"] == ["Decreto BA 4.342/1995 art. 60", "Decreto BA 4.342/1995 art. 98 IV e"]
    assert board("BA-U", "BA", 50).findings_of("occupancy.overload", profile="BA") == []
    (g,) = board("TO-R-STAND", "TO", 51).findings_of("occupancy.overload", profile="TO")
    assert g["details"]["excess"] == 1
    assert board("SP-S", "SP", 60).findings_of("occupancy.overload") == []


def test_a_counter_reset_mid_trip_does_not_reset_the_passengers_on_board() -> None:
    tl = departed("SP-R", boarded=38)
    tl.add("device", "V1", 45 * MIN, device="apc", status="counter_reset")
    tl.door("V1", 65 * MIN, boarded=8, alighted=5)          # 38 + 8 − 5 = 41 > 40 seats
    (f,) = tl.findings_of("occupancy.standing")
    assert (f["start"], f["details"]["peak_on_board"]) == ("2026-03-02T11:05:00.000Z", 41)


def test_passengers_on_board_never_go_below_zero() -> None:
    tl = departed("SP-R", boarded=5)
    tl.door("V1", 65 * MIN, alighted=10)                    # counts lost: 0 on board, not −5
    tl.door("V1", 66 * MIN, boarded=41)
    (f,) = tl.findings_of("occupancy.standing")
    assert f["details"]["peak_on_board"] == 41


# ---- stops.unapproved --------------------------------------------------------------------
def test_doors_opening_away_from_any_point() -> None:
    tl = departed("SP-R").door("V1", 64 * MIN, is_open=True).door("V1", 65 * MIN, boarded=2)
    tl.door("V1", 66 * MIN, door=2, alighted=1)
    (f,) = tl.findings_of("stops.unapproved")
    assert (f["severity"], f["start"], f["end"]) == ("warning", "2026-03-02T11:05:00.000Z",
                                                     "2026-03-02T11:06:00.000Z")
    assert (f["details"]["boarded"], f["details"]["alighted"]) == (2, 1)
    assert f["details"]["nearest_point"] == "Parada P"
    assert abs(f["details"]["nearest_m"] - 20_471) < 30     # 0.2° of longitude at 23° S
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 36"]
    ba = departed("BA-R", "BA").door("V1", 65 * MIN, boarded=2)
    (g,) = ba.findings_of("stops.unapproved", profile="BA")
    assert g["severity"] == "infraction"
    assert g["basis"] == ["Decreto BA 4.342/1995 art. 29", "Decreto BA 4.342/1995 art. 98 III d"]


def test_doors_at_approved_points_or_without_passengers_are_fine() -> None:
    empty = departed("BA-R", "BA").door("V1", 64 * MIN, is_open=True).door("V1", 65 * MIN)
    assert empty.findings_of("stops.unapproved", profile="BA") == []
    at_p = departed("BA-R", "BA").at("V1", 59 * MIN + 30_000, P).door("V1", 65 * MIN, boarded=2)
    assert at_p.findings_of("stops.unapproved", profile="BA") == []


# ---- doors.open_while_moving -------------------------------------------------------------
def _door_open_for(ms: int, line: str = "SP-R", profile: str = "SP") -> list[dict[str, Any]]:
    tl = departed(line, profile)           # 80 km/h from 30 to 60 min
    tl.door("V1", 45 * MIN, is_open=True).door("V1", 45 * MIN + ms, is_open=False)
    return tl.findings_of("doors.open_while_moving", profile=profile)


def test_a_door_open_while_moving_for_3_seconds() -> None:
    assert _door_open_for(2999) == []
    (f,) = _door_open_for(3000)
    assert (f["start"], f["end"]) == ("2026-03-02T10:45:00.000Z", "2026-03-02T10:45:03.000Z")
    assert (f["details"]["duration_s"], f["details"]["peak_kmh"]) == (3.0, 80)
    assert (f["severity"], f["basis"]) == ("infraction", ["Decreto SP 29.913/1989 art. 71 II"])
    (g,) = _door_open_for(3000, "BA-R", "BA")
    assert g["severity"] == "warning"


def test_a_door_open_while_stopped_is_fine() -> None:
    tl = departed("SP-R").door("V1", 64 * MIN, is_open=True).door("V1", 70 * MIN)
    assert tl.findings_of("doors.open_while_moving") == []


# ---- occupancy.index ---------------------------------------------------------------------
def _month(profile: str, line: str) -> TripLine:
    tl = TripLine(DAY[profile])
    tl.slot("V1", 0, 1, "C1", "work").speed("V1", 0, 0).at("V1", 0, A)
    tl.start_trip("V1", 1 * MIN, line, 30 * MIN)
    tl.door("V1", 20 * MIN, boarded=40)
    tl.moving("V1", 30 * MIN, 90 * MIN, kmh=100)         # 100 km/h for 1 h: 100 km
    tl.at("V1", 89 * MIN, (-23.0, -46.9))
    tl.door("V1", 95 * MIN, alighted=40)
    tl.add("trip", "V1", 96 * MIN, event="end", trip="T1", line=line)
    return tl


def test_the_monthly_index_once_the_local_month_is_over() -> None:
    tl = _month("SP", "SP-R")
    # 2026-04-01 00:00 in São Paulo = 03:00Z; t0 = 2026-03-02 10:00Z
    month_end = 29 * 24 * HOUR + 17 * HOUR
    assert tl.findings_of("occupancy.index", as_of_ms=month_end - 1) == []
    (f,) = tl.findings_of("occupancy.index", as_of_ms=month_end)
    assert (f["start"], f["end"]) == ("2026-03-01T03:00:00.000Z", "2026-04-01T03:00:00.000Z")
    assert (f["vehicle"], f["trip"], f["line"], f["severity"]) == (None, None, "SP-R", "report")
    # 40 passengers × 100 km / (40 seats × 100 km) = 1.0 > 0.70 + 0.15
    assert f["details"] == {"month": "2026-03", "trips": 1, "passengers": 40, "passenger_km": 4000.0,
                            "seat_km": 4000.0, "index": 1.0, "limit": 0.7, "tolerance": 0.15,
                            "insufficient": True}
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 15 §2"]


def test_the_index_is_a_statistic_alone_in_ba() -> None:
    tl = _month("BA", "BA-R")
    # 2000-04-01 00:00 in Bahia (UTC−3) = 03:00Z; t0 = 2000-03-01 10:00Z (2000 is a leap year)
    (f,) = tl.findings_of("occupancy.index", as_of_ms=30 * 24 * HOUR + 17 * HOUR, profile="BA")
    assert f["details"] == {"month": "2000-03", "trips": 1, "passengers": 40, "passenger_km": 4000.0,
                            "seat_km": 4000.0, "index": 1.0}


def test_passengers_follow_the_trip_to_a_replacement_vehicle() -> None:
    tl = departed("SP-R", boarded=30)                       # 30 on board V1, broken down at X
    tl.slot("V2", 100 * MIN, 1, "C2", "work").speed("V2", 100 * MIN, 0).at("V2", 100 * MIN, X)
    tl.start_trip("V2", 110 * MIN, "SP-R", None)            # the 30 move to V2
    tl.door("V2", 112 * MIN, boarded=11)                    # 41 on board V2 (40 seats)
    tl.door("V1", 113 * MIN, boarded=50)                    # V1 is released: not counted
    (f,) = tl.findings_of("occupancy.standing")
    assert (f["vehicle"], f["start"], f["details"]["peak_on_board"]) == (
        "V2", "2026-03-02T11:52:00.000Z", 41)
