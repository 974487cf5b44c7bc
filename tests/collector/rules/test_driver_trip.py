"""A driver finding belongs to the trip in which it became true (docs/rules.md): its vehicle, trip,
line and profile are those of the moment the limit was passed, not of when the driver's activity
segment ended."""

from __future__ import annotations

from tests.collector.rules.timeline import HOUR, MIN, Timeline, of


def test_the_limit_passed_mid_trip_on_a_to_line() -> None:
    # C1 drives V1 on trip T1 (line TO-1, profile TO) from 0, moving at 80 km/h until 6 h; the
    # trip ends at 6 h, and only at 6 h 10 min does the driver declare rest. Stopped with
    # `drive` declared still counts as driving, so one segment of driving runs 0 → 6 h 10 min.
    # ADI 5322 (2026): continuous limit 5 h 30 → passed at 5 h 30, inside T1;
    # breaks per 4 h: 4 h passed at 4 h with no break, inside T1. Both belong to T1 and TO.
    tl = Timeline()
    tl.trip("V1", 0, "start", "T1", "TO-1").slot("V1", 0, 1, "C1", "drive")
    tl.moving("V1", 0, 6 * HOUR)
    tl.trip("V1", 6 * HOUR, "end", "T1", "TO-1")
    tl.slot("V1", 6 * HOUR + 10 * MIN, 1, "C1", "rest")
    tl.speed("V1", 7 * HOUR, 0)
    found = tl.findings("SP")
    (cont,) = of(found, "driver.continuous_driving")
    assert (cont["trip"], cont["line"], cont["profile"], cont["vehicle"]) == (
        "T1", "TO-1", "TO", "V1")
    assert cont["details"]["exceeded_at"] == tl.ts(5 * HOUR + 30 * MIN)
    assert cont["end"] == tl.ts(6 * HOUR + 10 * MIN)
    assert cont["details"]["driving_min"] == 370.0
    (brk,) = of(found, "driver.break_per_4h")
    assert (brk["trip"], brk["profile"]) == ("T1", "TO")
    assert brk["details"]["exceeded_at"] == tl.ts(4 * HOUR)


def test_a_limit_passed_after_the_trip_is_outside_it() -> None:
    # the same, but the trip ends at 5 h (still moving, so still driving): the 5 h 30 limit is
    # passed after T1, outside any trip, under --profile (SP); the 4 h block inside T1 (TO)
    tl = Timeline()
    tl.trip("V1", 0, "start", "T1", "TO-1").slot("V1", 0, 1, "C1", "drive")
    tl.moving("V1", 0, 6 * HOUR)
    tl.trip("V1", 5 * HOUR, "end", "T1", "TO-1")
    tl.slot("V1", 6 * HOUR + 10 * MIN, 1, "C1", "rest")
    tl.speed("V1", 7 * HOUR, 0)
    found = tl.findings("SP")
    (cont,) = of(found, "driver.continuous_driving")
    assert (cont["trip"], cont["line"], cont["profile"]) == (None, None, "SP")
    (brk,) = of(found, "driver.break_per_4h")
    assert (brk["trip"], brk["profile"]) == ("T1", "TO")


def test_open_findings_use_the_moment_too() -> None:
    # judged at 6 h 05 min, the segment still running: the same trip and profile, open
    tl = Timeline()
    tl.trip("V1", 0, "start", "T1", "TO-1").slot("V1", 0, 1, "C1", "drive")
    tl.moving("V1", 0, 6 * HOUR)
    tl.trip("V1", 6 * HOUR, "end", "T1", "TO-1")
    tl.speed("V1", 6 * HOUR + 5 * MIN, 0)
    (cont,) = of(tl.findings("SP", as_of_ms=6 * HOUR + 5 * MIN), "driver.continuous_driving")
    assert (cont["trip"], cont["profile"], cont["end"]) == ("T1", "TO", None)
