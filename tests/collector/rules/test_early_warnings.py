"""Early warnings (issue 13): a daily rest reported as soon as it can no longer be met; notices
(severity ``notice``, ``details.early``) before the continuous-driving and workday limits;
``trip.assistance_due``'s ``grace_min``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collector.rules import evaluate, load_profiles
from collector.rules.profile import PROFILE_DIR
from protocols.records import ts_to_ms
from tests.collector.rules.timeline import HOUR, MIN, PROFILES, REGISTRY, Timeline, of
from tests.collector.rules.trip_fixture import REGISTRY as TRIP_REGISTRY
from tests.collector.rules.trip_fixture import departed

DAILY = "driver.daily_rest"


def at(tl: Timeline, rule: str, as_of_ms: int | None = None) -> list[dict[str, Any]]:
    """The findings of ``rule`` as ``frota check --as-of`` gives them: records after ``as_of``
    are not read."""
    if as_of_ms is None:
        return of(tl.findings(), rule)
    cut = tl.t0 + as_of_ms
    records = [r for r in tl.records if ts_to_ms(r["ts"]) <= cut]
    return of(evaluate(REGISTRY, PROFILES, records, "SP", cut), rule)


def _work_until(end_ms: int, rest: tuple[int, int] | None = None) -> Timeline:
    """C1 in slot 1 of V1, stopped, declaring work from 0 (10:00Z) until ``end_ms`` (then the
    card comes out: off duty is rest), except ``rest`` (declared rest) when given; the data goes
    on until the next day 11:00Z."""
    tl = Timeline()
    tl.speed("V1", 0, 0).slot("V1", 0, 1, "C1", "work")
    if rest is not None:
        tl.slot("V1", rest[0], 1, "C1", "rest").slot("V1", rest[1], 1, "C1", "work")
    tl.slot("V1", end_ms, 1, None, "unknown")
    tl.speed("V1", 25 * HOUR, 0)
    return tl


def test_a_daily_rest_impossible_from_23_00_is_reported_then() -> None:
    # ADI 5322: 11 h of continuous rest in the 24 h from the duty start (10:00Z → 10:00Z next
    # day). Working without a break until 00:00Z, the 11 h can no longer fit from 23:00Z
    # (10:00 − 11 h) on: at 23:00 exactly a rest starting then would still make 11 h; a
    # moment later it cannot. Reported then, open; closed at the window's end, same id.
    tl = _work_until(14 * HOUR)
    assert at(tl, DAILY, 13 * HOUR) == []
    (early,) = at(tl, DAILY, 13 * HOUR + 1000)
    assert (early["start"], early["end"], early["severity"]) == (
        "2026-03-02T10:00:00.000Z", None, "infraction")
    assert early["details"]["open"] is True
    assert early["details"]["impossible_at"] == "2026-03-02T23:00:00.000Z"
    assert (early["vehicle"], early["driver"]) == ("V1", "D1")
    (final,) = at(tl, DAILY)             # as_of = 11:00Z next day
    assert final["id"] == early["id"]
    assert final["end"] == "2026-03-03T10:00:00.000Z"
    assert final["details"]["impossible_at"] == "2026-03-02T23:00:00.000Z"
    assert final["details"]["longest_rest_min"] == 600.0     # 00:00Z → 10:00Z
    assert "open" not in final["details"]


def test_a_rest_over_23_00_that_stops_early_moves_the_moment() -> None:
    # a rest 22:00Z → 23:30Z (1 h 30), then work again until 00:00Z: resting at 23:00, the 11 h
    # could still come from 22:00 on; impossible only from 23:30, when work resumes
    tl = _work_until(14 * HOUR, rest=(12 * HOUR, 13 * HOUR + 30 * MIN))
    assert at(tl, DAILY, 13 * HOUR + 30 * MIN) == []
    (early,) = at(tl, DAILY, 13 * HOUR + 31 * MIN)
    assert early["details"]["impossible_at"] == "2026-03-02T23:30:00.000Z"


def test_a_rest_from_23_00_is_no_finding() -> None:
    # the card comes out at 23:00Z exactly: 11 h of rest until 10:00Z next day, enough
    tl = _work_until(13 * HOUR)
    assert at(tl, DAILY) == []
    assert at(tl, DAILY, 20 * HOUR) == []


# ---- notices -----------------------------------------------------------------------------
def _driving(until_ms: int) -> Timeline:
    """C1 drives V1 from 0 (10:00Z) at 80 km/h, samples every 10 min, still moving at
    ``until_ms``."""
    tl = Timeline()
    tl.slot("V1", 0, 1, "C1", "drive")
    for t in range(0, until_ms + 1, 10 * MIN):
        tl.speed("V1", t, 80)
    return tl


def test_a_notice_30_minutes_before_the_continuous_driving_limit() -> None:
    # ADI 5322: 5 h 30 of continuous driving. Still driving at 4 h 59: 31 min left, no notice;
    # at 5 h 00: 30 min left (≤ warn_before_min 30) → a notice, open, reached at 15:30Z;
    # at 5 h 31 the limit is passed: the infraction, no notice.
    tl = _driving(6 * HOUR)
    cont = "driver.continuous_driving"
    assert at(tl, cont, 4 * HOUR + 59 * MIN) == []
    (n,) = at(tl, cont, 5 * HOUR)
    assert (n["severity"], n["start"], n["end"]) == ("notice", tl.ts(0), None)
    assert n["details"]["early"] is True
    assert n["details"]["reached_at"] == "2026-03-02T15:30:00.000Z"
    assert (n["details"]["driving_min"], n["details"]["limit_min"]) == (300.0, 330.0)
    (f,) = at(tl, cont, 5 * HOUR + 31 * MIN)
    assert f["severity"] == "infraction"
    assert f["id"] != n["id"]


def test_no_driving_notice_once_stopped_with_work_declared() -> None:
    # driving until 5 h 10, then stopped with work declared: not driving at 5 h 15, no driving
    # notice (the duty of 5 h 15 is far from the 10 h workday limit: no notice either)
    tl = _driving(5 * HOUR)
    tl.speed("V1", 5 * HOUR + 10 * MIN, 0).slot("V1", 5 * HOUR + 10 * MIN, 1, "C1", "work")
    found = at(tl, "driver.continuous_driving", 5 * HOUR + 15 * MIN)
    assert [f["severity"] for f in found] == []
    assert at(tl, "driver.workday", 5 * HOUR + 15 * MIN) == []


def test_a_notice_30_minutes_before_the_workday_limit() -> None:
    # on duty (stopped, work declared) from 0: 8 h + 2 h = 10 h. At 9 h 29: 31 min left, no
    # notice; at 9 h 30: a notice reached at 20:00Z; at 10 h 01: the infraction.
    tl = _work_until(12 * HOUR)
    assert at(tl, "driver.workday", 9 * HOUR + 29 * MIN) == []
    (n,) = at(tl, "driver.workday", 9 * HOUR + 30 * MIN)
    assert (n["severity"], n["details"]["reached_at"]) == ("notice", "2026-03-02T20:00:00.000Z")
    assert (n["details"]["worked_min"], n["details"]["limit_min"]) == (570.0, 600.0)
    (f,) = at(tl, "driver.workday", 10 * HOUR + 1 * MIN)
    assert f["severity"] == "infraction"


# ---- trip.assistance_due: grace_min --------------------------------------------------------
def test_assistance_grace_is_the_operators_policy(tmp_path: Path) -> None:
    # SP: the breakdown (carrier at fault) at 61 min interrupts the stop that began at 60 min;
    # assistance is due at once (grace_min 0): a report at 75 min is overdue. With an
    # operator's copy saying grace_min = 20, due at 80 min: the same report is timely.
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=True)
    tl.add("report", "V1", 75 * MIN, incident_ts=tl.ts(61 * MIN), to="passengers")
    tl.moving("V1", 100 * MIN, 110 * MIN)
    (d,) = tl.findings_of("trip.assistance_due")
    assert (d["details"]["due"], d["details"]["grace_min"], d["details"]["overdue"]) == (
        "2026-03-02T11:00:00.000Z", 0.0, True)
    copy = tmp_path / "sp.toml"
    copy.write_text((PROFILE_DIR / "SP.toml").read_text().replace("grace_min = 0.0",
                                                                  "grace_min = 20.0"))
    profiles = load_profiles([str(copy)])
    (g,) = of(evaluate(TRIP_REGISTRY, profiles, tl.records, "SP"), "trip.assistance_due")
    assert (g["details"]["due"], g["details"]["overdue"]) == ("2026-03-02T11:20:00.000Z", False)
    assert g["id"] == d["id"]
