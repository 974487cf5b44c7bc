"""trip.interruption and the deadlines it opens, built by hand at each edge, per profile (docs/rules.md:
SP 39/78 120 min; BA 32 and TO 56 always a report; a stop with rest declared is a break;
assistance SP 39 §1 any duration, BA 58 §2 I after 4 h; BA 58 §2 II report after 4 h; SP 41,
43 II reports)."""

from __future__ import annotations

from typing import Any

from tests.collector.rules.timeline import HOUR, MIN
from tests.collector.rules.trip_fixture import P, X, departed

SP_BASIS = ["Decreto SP 29.913/1989 art. 39", "Decreto SP 29.913/1989 art. 78"]


def test_sp_exactly_120_minutes_is_a_report() -> None:
    tl = departed("SP-R").moving("V1", 180 * MIN, 190 * MIN)
    (f,) = tl.findings_of("trip.interruption")
    assert (f["start"], f["end"]) == ("2026-03-02T11:00:00.000Z", "2026-03-02T13:00:00.000Z")
    assert f["severity"] == "report"
    assert (f["vehicle"], f["driver"], f["trip"], f["line"]) == ("V1", "D1", "T1", "SP-R")
    assert f["basis"] == SP_BASIS
    assert f["details"]["duration_min"] == 120.0
    assert f["details"]["limit_min"] == 120.0
    assert (f["details"]["lat"], f["details"]["lon"]) == X


def test_sp_one_second_over_120_minutes_is_an_infraction() -> None:
    tl = departed("SP-R").moving("V1", 180 * MIN + 1000, 190 * MIN)
    (f,) = tl.findings_of("trip.interruption")
    assert f["end"] == "2026-03-02T13:00:01.000Z"
    assert f["severity"] == "infraction"
    assert f["details"]["duration_min"] == 120.02          # 120 min 1 s


def test_a_stop_away_counts_from_15_minutes() -> None:
    short = departed("SP-R").moving("V1", 75 * MIN - 1000, 90 * MIN)
    assert short.findings_of("trip.interruption") == []
    exact = departed("SP-R").moving("V1", 75 * MIN, 90 * MIN)
    (f,) = exact.findings_of("trip.interruption")
    assert f["details"]["duration_min"] == 15.0
    assert f["severity"] == "report"


def test_a_long_stop_at_an_approved_point_is_not_an_interruption() -> None:
    tl = departed("SP-R").at("V1", 59 * MIN + 30_000, P).moving("V1", 240 * MIN, 250 * MIN)
    assert tl.findings_of("trip.interruption") == []


def test_a_stop_with_rest_declared_is_a_break() -> None:
    tl = departed("SP-R").slot("V1", 61 * MIN, 1, "C1", "rest").slot("V1", 239 * MIN, 1, "C1",
                                                                         "work")
    tl.moving("V1", 240 * MIN, 250 * MIN)
    assert tl.findings_of("trip.interruption") == []


def test_an_incident_makes_any_stop_an_interruption() -> None:
    tl = departed("SP-R").at("V1", 59 * MIN + 30_000, P)
    tl.add("incident", "V1", 62 * MIN, cause="breakdown")
    tl.moving("V1", 70 * MIN, 80 * MIN)
    (f,) = tl.findings_of("trip.interruption")
    assert f["details"]["duration_min"] == 10.0
    assert f["details"]["cause"] == "breakdown"
    assert f["severity"] == "report"


def test_ba_and_to_always_report_whatever_the_duration() -> None:
    ba = departed("BA-R", "BA").moving("V1", 360 * MIN, 370 * MIN)
    (f,) = ba.findings_of("trip.interruption", profile="BA")
    assert f["severity"] == "report"
    assert f["basis"] == ["Decreto BA 4.342/1995 art. 32"]
    assert f["details"]["duration_min"] == 300.0
    assert "limit_min" not in f["details"]
    to = departed("TO-R", "TO").moving("V1", 240 * MIN, 250 * MIN)
    (g,) = to.findings_of("trip.interruption", profile="TO")
    assert (g["severity"], g["basis"]) == ("report", ["Regulamento TO art. 56"])
    assert g["details"]["duration_min"] == 180.0


def test_ba_report_due_after_four_hours() -> None:
    exact = departed("BA-R", "BA").moving("V1", 300 * MIN, 310 * MIN)
    assert exact.findings_of("trip.report_due", profile="BA") == []
    over = departed("BA-R", "BA").moving("V1", 300 * MIN + 1000, 310 * MIN)
    (d,) = over.findings_of("trip.report_due", profile="BA")
    assert d["severity"] == "deadline"
    assert d["start"] == "2000-03-01T15:00:00.000Z"          # stopped 11:00 + 4 h
    assert d["details"]["due"] == "2000-03-03T15:00:00.000Z"  # + 48 h
    assert d["details"]["fine_after"] == "2000-03-06T15:00:00.000Z"  # + 5 days (98 III j)
    assert d["end"] is None
    # SP opens no deadline for a long interruption without an incident
    sp = departed("SP-R").moving("V1", 300 * MIN + 1000, 310 * MIN)
    assert sp.findings_of("trip.report_due") == []


def _replaced(after_min: int) -> list[dict[str, Any]]:
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=False)
    join = (60 + after_min) * MIN
    tl.slot("V2", join - 5 * MIN, 1, "C2", "work").speed("V2", join - 5 * MIN, 0)
    tl.at("V2", join - 5 * MIN, X)
    tl.start_trip("V2", join, "SP-R", None)
    tl.moving("V2", join + 10 * MIN, join + 60 * MIN)
    tl.moving("V1", join + 20 * MIN, join + 40 * MIN)       # V1, released, drives away
    return tl.findings_of("trip.interruption")


def test_a_replacement_within_120_minutes_ends_the_interruption() -> None:
    (f,) = _replaced(100)
    assert (f["start"], f["end"]) == ("2026-03-02T11:00:00.000Z", "2026-03-02T12:40:00.000Z")
    assert (f["vehicle"], f["details"]["replacement"]) == ("V1", "V2")
    assert f["severity"] == "report"


def test_a_replacement_beyond_120_minutes_is_an_infraction() -> None:
    (f,) = _replaced(121)
    assert f["end"] == "2026-03-02T13:01:00.000Z"
    assert f["details"]["duration_min"] == 121.0
    assert f["severity"] == "infraction"


def test_an_open_interruption_grows_and_keeps_its_id() -> None:
    tl = departed("SP-R")
    (early,) = tl.findings_of("trip.interruption", as_of_ms=80 * MIN)
    (late,) = tl.findings_of("trip.interruption", as_of_ms=190 * MIN)
    assert early["id"] == late["id"]
    assert (early["severity"], early["end"], early["details"]["duration_min"]) == \
        ("report", None, 20.0)
    assert (late["severity"], late["end"], late["details"]["duration_min"]) == \
        ("infraction", None, 130.0)
    assert late["details"]["open"] is True
    assert tl.findings_of("trip.interruption", as_of_ms=74 * MIN) == []


def test_sp_assistance_due_at_once_closed_by_a_report_to_passengers() -> None:
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=True)
    tl.add("report", "V1", 80 * MIN, incident_ts=tl.ts(61 * MIN), to="DER")
    tl.moving("V1", 100 * MIN, 110 * MIN)
    (d,) = tl.findings_of("trip.assistance_due")
    assert (d["severity"], d["start"], d["end"]) == ("deadline", "2026-03-02T11:00:00.000Z", None)
    assert d["details"]["due"] == "2026-03-02T11:00:00.000Z"
    assert d["basis"] == ["Decreto SP 29.913/1989 art. 39 §1"]
    tl.add("report", "V1", 90 * MIN, incident_ts=tl.ts(61 * MIN), to="passengers")
    (closed,) = tl.findings_of("trip.assistance_due")
    assert closed["id"] == d["id"]
    assert closed["end"] == "2026-03-02T11:30:00.000Z"


def test_no_assistance_without_carrier_fault() -> None:
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=False)
    tl.moving("V1", 100 * MIN, 110 * MIN)
    assert tl.findings_of("trip.assistance_due") == []


def test_ba_assistance_after_four_hours() -> None:
    def run(end_ms: int) -> list[dict[str, Any]]:
        tl = departed("BA-R", "BA")
        tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=True)
        tl.moving("V1", end_ms, end_ms + 10 * MIN)
        return tl.findings_of("trip.assistance_due", profile="BA")

    assert run(300 * MIN) == []
    (d,) = run(300 * MIN + 1000)
    assert d["start"] == d["details"]["due"] == "2000-03-01T15:00:00.000Z"
    assert d["basis"] == ["Decreto BA 4.342/1995 art. 58 §2 I"]


def test_force_majeure_opens_a_48_hour_report_deadline() -> None:
    tl = departed("SP-R")
    tl.add("incident", "V1", 61 * MIN, cause="force_majeure")
    tl.moving("V1", 100 * MIN, 110 * MIN)
    (d,) = tl.findings_of("trip.report_due", as_of_ms=49 * HOUR)
    assert (d["start"], d["details"]["due"]) == ("2026-03-02T11:01:00.000Z",
                                                 "2026-03-04T11:01:00.000Z")
    assert d["basis"] == ["Decreto SP 29.913/1989 art. 41"]
    assert (d["end"], d["details"]["overdue"]) == (None, False)
    (late,) = tl.findings_of("trip.report_due", as_of_ms=50 * HOUR)
    assert late["details"]["overdue"] is True
    tl.add("report", "V1", 30 * HOUR, finding=d["id"], to="DER")
    (closed,) = tl.findings_of("trip.report_due", as_of_ms=50 * HOUR)
    assert (closed["end"], closed["details"]["overdue"]) == ("2026-03-03T16:00:00.000Z", False)


def test_an_accident_with_victims_names_the_data_to_export() -> None:
    tl = departed("TO-R", "TO")
    tl.add("incident", "V1", 61 * MIN, cause="accident_victims")
    (d,) = tl.findings_of("trip.accident_data", profile="TO")
    assert d["severity"] == "deadline"
    assert d["start"] == d["details"]["due"] == "2026-03-02T11:01:00.000Z"
    assert d["details"]["export"] == {"vehicle": "V1", "from": "2026-03-01T11:01:00.000Z",
                                      "to": "2026-03-02T11:01:00.000Z"}
    assert d["basis"] == ["Regulamento TO art. 58 § único"]
    assert len(tl.findings_of("trip.report_due", profile="TO")) == 1
    tl.add("report", "V1", 120 * MIN, incident_ts=tl.ts(61 * MIN), to="SETO")
    assert tl.findings_of("trip.accident_data", profile="TO")[0]["end"] == \
        "2026-03-02T12:00:00.000Z"
    assert tl.findings_of("trip.report_due", profile="TO")[0]["end"] == \
        "2026-03-02T12:00:00.000Z"
