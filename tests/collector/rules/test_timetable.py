"""The timetable the operator promised (registry ``lines[].timetable``): ``schedule.trip_not_run``
(BA 98 IV j; TO 104 IV a) and ``schedule.service_level`` (BA 103 II), worked out by hand.

Dates in May 2000: inside the BA decree's validity (1995–2001) and outside Bahia's daylight
saving time (America/Bahia is UTC−3 then), so local 08:00 is 11:00Z.
"""

from __future__ import annotations

from typing import Any

from collector.registry import Registry
from collector.rules import evaluate
from protocols.records import ms_to_ts, ts_to_ms, validate
from tests.collector.rules.timeline import PROFILES

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
#: 2000-05-01 00:00 in Bahia (a Monday)
MAY_1 = ts_to_ms("2000-05-01T03:00:00Z")
WEEKDAYS = ["mon", "tue", "wed", "thu", "fri"]
EVERY_DAY = [*WEEKDAYS, "sat", "sun"]


def registry(departures: list[dict[str, Any]], profile: str = "BA") -> Registry:
    return Registry.from_dict({
        "lines": [{"id": "L-T", "profile": profile, "service": "rodoviario", "length_km": 100,
                   "timetable": {"service_order": "OS 17/2000", "valid_from": "2000-05-01",
                                 "departures": departures}}],
        "vehicles": [{"id": "V1", "seats": 40}],
    })


def ran(deps_ms: list[int], *, late_ms: int = 0, scheduled: bool = True) -> list[dict[str, Any]]:
    """A trip started for each departure (2 min before it, or ``late_ms`` after it), ended 30
    min after."""
    out = []
    for n, dep in enumerate(deps_ms):
        start = dep - 2 * MIN if not late_ms else dep + late_ms
        extra = {"scheduled": ms_to_ts(dep)} if scheduled else {}
        out.append(validate({"vehicle": "V1", "ts": ms_to_ts(start), "kind": "trip",
                             "event": "start", "trip": f"T{dep}-{n}", "line": "L-T", **extra}))
        out.append(validate({"vehicle": "V1", "ts": ms_to_ts(dep + 30 * MIN), "kind": "trip",
                             "event": "end", "trip": f"T{dep}-{n}", "line": "L-T"}))
    return sorted(out, key=lambda r: r["ts"])


def of(found: list[dict[str, Any]], rule: str) -> list[dict[str, Any]]:
    return [f for f in found if f["rule"] == rule]


def test_a_week_with_three_departures_not_run() -> None:
    # 08:00 and 17:00 every day, 12:00 on weekdays: 5 × 3 + 2 × 2 = 19 departures in the week
    # of 1–7 May 2000. Not run: Tue 12:00, Thu 17:00, Sun 08:00. Wed 08:00 starts 8 min late
    # without a scheduled time: within the 10 min, it runs it.
    reg = registry([{"time": "08:00", "weekdays": EVERY_DAY},
                    {"time": "17:00", "weekdays": EVERY_DAY},
                    {"time": "12:00", "weekdays": WEEKDAYS}])
    deps = []
    for d in range(7):
        day = MAY_1 + d * DAY
        deps += [day + 8 * HOUR, day + 17 * HOUR] + ([day + 12 * HOUR] if d < 5 else [])
    assert len(deps) == 19
    missing = [MAY_1 + DAY + 12 * HOUR, MAY_1 + 3 * DAY + 17 * HOUR, MAY_1 + 6 * DAY + 8 * HOUR]
    wed_8 = MAY_1 + 2 * DAY + 8 * HOUR
    on_time = [d for d in deps if d not in missing and d != wed_8]
    records = ran(on_time) + ran([wed_8], late_ms=8 * MIN, scheduled=False)
    as_of = MAY_1 + 7 * DAY                        # 2000-05-08 00:00 local
    found = evaluate(reg, PROFILES, sorted(records, key=lambda r: r["ts"]), "BA", as_of)
    not_run = of(found, "schedule.trip_not_run")
    # 2 May 12:00 local = 15:00Z; 4 May 17:00 = 20:00Z; 7 May 08:00 = 11:00Z
    assert [(f["start"], f["end"]) for f in not_run] == [
        ("2000-05-02T15:00:00.000Z", "2000-05-02T15:10:00.000Z"),
        ("2000-05-04T20:00:00.000Z", "2000-05-04T20:10:00.000Z"),
        ("2000-05-07T11:00:00.000Z", "2000-05-07T11:10:00.000Z")]
    f = not_run[0]
    assert (f["severity"], f["line"], f["vehicle"], f["trip"]) == ("infraction", "L-T", None, None)
    assert f["basis"] == ["Decreto BA 4.342/1995 art. 98 IV j"]
    assert f["details"] == {"scheduled": "2000-05-02T15:00:00.000Z", "tolerance_min": 10.0,
                            "service_order": "OS 17/2000"}
    assert of(found, "schedule.service_level") == []      # no 30 days yet


def test_eleven_minutes_late_does_not_run_it_and_tolerance_waits() -> None:
    # one departure, 08:00 on 1 May; a trip starting 11 min late without a scheduled time
    reg = registry([{"time": "08:00", "dates": ["2000-05-01"]}])
    dep = MAY_1 + 8 * HOUR
    late = ran([dep], late_ms=11 * MIN, scheduled=False)
    assert len(of(evaluate(reg, PROFILES, late, "BA", dep + DAY), "schedule.trip_not_run")) == 1
    # nothing run at all (a vehicle's record an hour before): reported only once the 10
    # minutes are over
    probe = [validate({"vehicle": "V1", "ts": ms_to_ts(dep - HOUR), "kind": "speed", "kmh": 0})]
    assert of(evaluate(reg, PROFILES, probe, "BA", dep + 10 * MIN),
              "schedule.trip_not_run") == []
    assert len(of(evaluate(reg, PROFILES, probe, "BA", dep + 10 * MIN + 1),
                  "schedule.trip_not_run")) == 1


def test_trip_not_run_applies_in_to_not_in_sp() -> None:
    deps = [{"time": "08:00", "dates": ["2000-05-01"]}]
    probe = [validate({"vehicle": "V1", "ts": ms_to_ts(MAY_1), "kind": "speed", "kmh": 0})]
    to = evaluate(registry(deps, "TO"), PROFILES, probe, "TO", MAY_1 + DAY)
    assert [f["basis"] for f in of(to, "schedule.trip_not_run")] == [
        ["Regulamento TO art. 104 IV a"]]
    sp = evaluate(registry(deps, "SP"), PROFILES, probe, "SP", MAY_1 + DAY)
    assert of(sp, "schedule.trip_not_run") == []


def _thirty_days(run_count: int) -> list[dict[str, Any]]:
    """10 departures a day (06:00 … 15:00) for 1–30 May 2000 = 300; the first ``run_count``
    run; judged at 31 May 00:00 local, when exactly one 30-day window (1–30 May) is over."""
    reg = registry([{"time": f"{h:02d}:00", "weekdays": EVERY_DAY} for h in range(6, 16)])
    deps = [MAY_1 + d * DAY + h * HOUR for d in range(30) for h in range(6, 16)]
    found = evaluate(reg, PROFILES, ran(deps[:run_count]), "BA", MAY_1 + 30 * DAY)
    return of(found, "schedule.service_level")


def test_service_level_30_days_at_69_percent() -> None:
    # 207 of 300 = 69 % ≤ 70 %: BA 103 II, the window 1–30 May
    (f,) = _thirty_days(207)
    assert (f["start"], f["end"]) == ("2000-05-01T03:00:00.000Z", "2000-05-31T03:00:00.000Z")
    assert f["details"]["worst_window"] == ["2000-05-01", "2000-05-30"]
    assert (f["details"]["scheduled"], f["details"]["run"], f["details"]["run_pct"]) == (
        300, 207, 69.0)
    assert f["basis"] == ["Decreto BA 4.342/1995 art. 103 II"]


def test_service_level_30_days_at_71_percent_and_at_70() -> None:
    assert _thirty_days(213) == []                  # 213 / 300 = 71 %
    (f,) = _thirty_days(210)                        # 70 % exactly: "70 % or fewer"
    assert f["details"]["run_pct"] == 70.0
