"""``fleet.inspection_expired`` (SP 62 §1, 64; BA 50, 98 IV k) and ``fleet.age`` (SP 61 §1) from
the registry's ``inspections`` and ``manufactured``, worked out by hand."""

from __future__ import annotations

from typing import Any

from collector.registry import Registry
from collector.rules import evaluate
from protocols.records import ms_to_ts, ts_to_ms, validate
from tests.collector.rules.timeline import PROFILES

HOUR = 3_600_000


def _registry(vehicles: list[dict[str, Any]]) -> Registry:
    return Registry.from_dict({
        "lines": [{"id": "SP-1", "profile": "SP", "service": "rodoviario", "length_km": 100},
                  {"id": "TO-1", "profile": "TO", "service": "rodoviario", "length_km": 100}],
        "vehicles": vehicles})


def _trip(vehicle: str, start: str, trip: str, line: str = "SP-1") -> list[dict[str, Any]]:
    ms = ts_to_ms(start)
    return [validate({"vehicle": vehicle, "ts": ms_to_ts(ms), "kind": "trip", "event": "start",
                      "trip": trip, "line": line}),
            validate({"vehicle": vehicle, "ts": ms_to_ts(ms + 2 * HOUR), "kind": "trip",
                      "event": "end", "trip": trip, "line": line})]


def _of(found: list[dict[str, Any]], rule: str) -> list[dict[str, Any]]:
    return [f for f in found if f["rule"] == rule]


def test_in_service_after_the_annual_inspection_lapsed() -> None:
    # inspected 2025-03-01: valid 12 months, through 2026-02-28 (lapsed from 2026-03-01, local).
    # Trips on 28 Feb (valid), 2 and 3 March (lapsed, one finding: from the first one's start
    # to the last one's end), and 6 March after a new inspection on 5 March (valid again).
    reg = _registry([{"id": "V1", "seats": 40,
                      "inspections": ["2025-03-01", "2026-03-05"]}])
    records = (_trip("V1", "2026-02-28T12:00:00Z", "A") + _trip("V1", "2026-03-02T12:00:00Z", "B")
               + _trip("V1", "2026-03-03T12:00:00Z", "C") + _trip("V1", "2026-03-06T12:00:00Z", "D"))
    (f,) = _of(evaluate(reg, PROFILES, records, "SP"), "fleet.inspection_expired")
    assert (f["start"], f["end"]) == ("2026-03-02T12:00:00.000Z", "2026-03-03T14:00:00.000Z")
    assert (f["vehicle"], f["profile"], f["severity"]) == ("V1", "SP", "infraction")
    assert f["details"] == {"last_inspection": "2025-03-01", "expired_on": "2026-03-01",
                            "trips": 2, "valid_months": 12}
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 62 §1", "Decreto SP 29.913/1989 art. 64"]


def test_a_lapse_still_in_service_is_open_and_to_does_not_judge_it() -> None:
    reg = _registry([{"id": "V1", "seats": 40, "inspections": ["2025-01-10"]},
                     {"id": "V2", "seats": 40}])             # no inspections: not judged
    records = _trip("V1", "2026-03-02T12:00:00Z", "B")[:1] + _trip("V2", "2026-03-02T12:00:00Z", "X")
    (f,) = _of(evaluate(reg, PROFILES, records, "SP"), "fleet.inspection_expired")
    assert (f["end"], f["details"]["open"], f["details"]["expired_on"]) == (
        None, True, "2026-01-10")
    on_to = _trip("V1", "2026-03-02T12:00:00Z", "B", line="TO-1")
    assert _of(evaluate(reg, PROFILES, on_to, "SP"), "fleet.inspection_expired") == []


def test_fleet_age_more_than_20_percent_older_than_10_years() -> None:
    # as of 2026: made 2010, 2014, 2018, 2020, 2022 → ages 16, 12, 8, 6, 4: two of five older
    # than 10 = 40 % > 20 %. With 2014 → 2018: one of five = 20 %, not more than 20 %: none.
    years = [2010, 2014, 2018, 2020, 2022]
    reg = _registry([{"id": f"V{i}", "seats": 40, "manufactured": y} for i, y in enumerate(years)])
    probe = _trip("V0", "2026-03-02T12:00:00Z", "A")
    (f,) = _of(evaluate(reg, PROFILES, probe, "SP"), "fleet.age")
    assert (f["start"], f["end"], f["vehicle"]) == ("2026-01-01T03:00:00.000Z", None, None)
    assert f["details"]["older"] == ["V0", "V1"]
    assert (f["details"]["share_pct"], f["details"]["vehicles"]) == (40.0, 5)
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 61 §1"]
    years[1] = 2018
    reg = _registry([{"id": f"V{i}", "seats": 40, "manufactured": y} for i, y in enumerate(years)])
    assert _of(evaluate(reg, PROFILES, probe, "SP"), "fleet.age") == []
