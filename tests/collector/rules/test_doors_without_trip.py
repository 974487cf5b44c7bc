"""``doors.open_while_moving`` has no trip condition (SP 71 II; TO 70 II): a door open while
moving is a finding after ``trip end`` and with no trip at all."""

from __future__ import annotations

from tests.collector.rules.timeline import MIN
from tests.collector.rules.trip_fixture import SP_DAY, A, TripLine

S = 1000


def test_a_door_opened_at_the_end_and_driven_away_with() -> None:
    # Trip T1 from 0, 80 km/h until 10 min; at the final stop the door opens at 11 min, the trip
    # ends at 12 min, and the bus drives off at 30 km/h (samples every 10 s from 13 min) with the
    # door still open until it closes at 14 min: 30 > moving_kmh 5 from 13:00 to 14:00 = 60 s
    # (≥ min_s 3), outside any trip, judged by the vehicle's profile (SP, --profile).
    tl = TripLine(SP_DAY)
    tl.slot("V1", 0, 1, "C1", "drive").at("V1", 0, A).start_trip("V1", 0, "SP-R", None)
    tl.moving("V1", 0, 10 * MIN)
    tl.door("V1", 11 * MIN, is_open=True)
    tl.add("trip", "V1", 12 * MIN, event="end", trip="T1", line="SP-R")
    for t in range(13 * MIN, 14 * MIN, 10 * S):
        tl.speed("V1", t, 30)
    tl.door("V1", 14 * MIN, is_open=False)
    tl.speed("V1", 14 * MIN + 10 * S, 30)
    (f,) = tl.findings_of("doors.open_while_moving")
    assert (f["start"], f["end"]) == ("2026-03-02T10:13:00.000Z", "2026-03-02T10:14:00.000Z")
    assert (f["trip"], f["line"], f["profile"], f["vehicle"]) == (None, None, "SP", "V1")
    assert (f["details"]["duration_s"], f["details"]["peak_kmh"]) == (60.0, 30.0)
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 71 II"]


def test_a_door_open_while_moving_with_no_trip_at_all() -> None:
    # no trip record: the door opens at 1 min, the bus moves at 20 km/h from 2 min (samples
    # every 10 s) and the door closes at 2 min 30 s: 30 s open while moving
    tl = TripLine(SP_DAY)
    tl.slot("V1", 0, 1, "C1", "drive").speed("V1", 0, 0).door("V1", 1 * MIN, is_open=True)
    for t in range(2 * MIN, 3 * MIN, 10 * S):
        tl.speed("V1", t, 20)
    tl.door("V1", 2 * MIN + 30 * S, is_open=False)
    (f,) = tl.findings_of("doors.open_while_moving")
    assert (f["start"], f["end"], f["trip"]) == ("2026-03-02T10:02:00.000Z",
                                                 "2026-03-02T10:02:30.000Z", None)
    assert f["details"]["duration_s"] == 30.0
