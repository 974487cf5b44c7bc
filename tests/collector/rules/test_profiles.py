"""The SP, BA and TO profiles: docs/rules.md's catalogue, citations, validity, and operators' copies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collector.rules.pipeline import RULE_PARAMS
from collector.rules.profile import ProfileError, builtin, load_profiles
from protocols.records import ts_to_ms

FEDERAL = ("speed.over_limit", "driver.continuous_driving", "driver.break_per_4h",
           "driver.daily_rest", "driver.workday", "driver.unidentified", "equipment.registrador")
#: docs/rules.md, "Which rules apply where"
TABLE = {
    "driver.two_drivers": ("BA",),
    "trip.interruption": ("SP", "BA", "TO"),
    "trip.assistance_due": ("SP", "BA"),
    "trip.report_due": ("SP", "BA", "TO"),
    "trip.accident_data": ("SP", "BA", "TO"),
    "schedule.presence": ("BA", "TO"),
    "schedule.late_departure": ("SP", "BA"),
    "schedule.trip_not_run": ("BA", "TO"),
    "schedule.service_level": ("BA",),
    "fleet.inspection_expired": ("SP", "BA"),
    "fleet.age": ("SP",),
    "occupancy.standing": ("SP", "BA", "TO"),
    "stops.unapproved": ("SP", "BA", "TO"),
    "occupancy.index": ("SP", "BA", "TO"),
    "occupancy.overload": ("BA", "TO"),
    "doors.open_while_moving": ("SP", "BA", "TO"),
    "retention.minimum": ("SP", "BA", "TO"),
}
CITATION = re.compile(
    r"^(CTB art\. [0-9A-Z-]+|CLT art\. [0-9A-Z-]+|Decreto SP 29\.913/1989 art\. \d+"
    r"|Decreto BA 4\.342/1995 art\. \d+|Regulamento TO art\. \d+"
    r"|Resolução CONTRAN 938/2022 art\. \d+)( (§\d+(-A)?|§ único|[IVX]+|item \d+|[a-z]))*$"
)


@pytest.mark.parametrize("name", ["SP", "BA", "TO"])
def test_which_rules_apply_where(name: str) -> None:
    profile = builtin(name)
    assert set(profile.rules) == set(RULE_PARAMS)
    for rule in FEDERAL:
        assert profile.rule(rule).applies, rule
    for rule, where in TABLE.items():
        assert profile.rule(rule).applies == (name in where), (name, rule)


@pytest.mark.parametrize("name", ["SP", "BA", "TO"])
def test_citations_are_in_full_form(name: str) -> None:
    for rule, cfg in builtin(name).rules.items():
        for cite in cfg.basis:
            assert CITATION.match(cite), (name, rule, cite)
        if cfg.applies and not (name == "BA" and rule in ("doors.open_while_moving",
                                                          "retention.minimum")):
            assert cfg.basis, (name, rule)


def test_numbers_that_differ_between_profiles() -> None:
    sp, ba, to = builtin("SP"), builtin("BA"), builtin("TO")
    assert sp.rule("trip.interruption").params.limit_min == 120
    assert ba.rule("trip.interruption").params.limit_min is None
    assert (sp.rule("trip.interruption").severity, ba.rule("trip.interruption").severity) == (
        "infraction", "report")
    assert ba.rule("trip.assistance_due").params.after_h == 4
    assert sp.rule("trip.assistance_due").params.after_h is None
    assert sp.rule("stops.unapproved").severity == "warning"
    assert ba.rule("doors.open_while_moving").severity == "warning"
    assert to.rule("occupancy.standing").params.semiurban_pct == 40
    assert to.rule("schedule.presence").params.exempt_services == ("semiurbano",)
    assert sp.rule("occupancy.index").params.limits == {"rodoviario": 0.70, "suburbano": 1.00}
    assert [p.rule("retention.minimum").params.minimum_days for p in (sp, ba, to)] == [
        365, 365, 90]
    assert (sp.timezone, ba.timezone, to.timezone) == (
        "America/Sao_Paulo", "America/Bahia", "America/Araguaina")


def test_validity_periods() -> None:
    sp, ba = builtin("SP"), builtin("BA")
    # 12/05/1989 00:00 in São Paulo (UTC−3 then) = 03:00 UTC
    assert sp.outside_validity(ts_to_ms("1989-05-12T02:59:59.999Z"))
    assert not sp.outside_validity(ts_to_ms("1989-05-12T03:00:00.000Z"))
    assert not ba.outside_validity(ts_to_ms("2000-01-01T12:00:00.000Z"))
    assert ba.outside_validity(ts_to_ms("2026-03-02T12:00:00.000Z"))  # revoked in 2001


def test_driver_periods() -> None:
    sp = builtin("SP")
    assert sp.period_at(ts_to_ms("2012-06-16T02:59:59.000Z")).law.startswith("CLT")
    assert sp.period_at(ts_to_ms("2012-06-16T03:00:00.000Z")).law == "Lei 12.619/2012"
    assert sp.period_at(ts_to_ms("2015-04-17T03:00:00.000Z")).law == "Lei 13.103/2015"
    adi = sp.period_at(ts_to_ms("2023-07-12T03:00:00.000Z"))
    assert adi.law == "STF ADI 5322"
    assert adi.co_driver_available
    assert adi.split_first_ms is None


def _copy(tmp_path: Path, old: str, new: str, name: str = "SP") -> str:
    text = Path(builtin(name).source).read_text()
    assert old in text
    path = tmp_path / "copy.toml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


def test_an_operators_copy_replaces_the_builtin(tmp_path: Path) -> None:
    path = _copy(tmp_path, "overtime_h = 2.0", "overtime_h = 4")
    profiles = load_profiles([path])
    assert profiles["SP"].rule("driver.workday").params.overtime_h == 4
    assert profiles["SP"].source == path
    assert profiles["BA"].source != path


@pytest.mark.parametrize(("old", "new", "message"), [
    ("overtime_h = 2.0", "overtime_hours = 2.0",
     "rules.'driver.workday': unknown parameter 'overtime_hours'"),
    ("min_duration_s = 10.0", 'min_duration_s = "10"',
     "rules.'speed.over_limit'.min_duration_s: '10' is not a number"),
    ("enforcement_tolerance = false", "enforcement_tolerance = 1",
     "rules.'speed.over_limit'.enforcement_tolerance: 1 is not true or false"),
    ('[rules."driver.workday"]', '[rules."driver.workweek"]', "unknown rule 'driver.workweek'"),
    ('timezone = "America/Sao_Paulo"', 'timezone = "America/Atlantis"',
     "timezone 'America/Atlantis' is not a time zone"),
    ('severity = "warning"', 'severity = "minor"', "severity 'minor' is not one of"),
    ('name = "SP"', 'name = "RJ"', "name 'RJ' is not a built-in profile"),
    ('valid_from = "1989-05-12"', 'valid_from = "12/05/1989"', "is not a date"),
])
def test_a_bad_copy_is_refused_clearly(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = _copy(tmp_path, old, new)
    with pytest.raises(ProfileError) as info:
        load_profiles([path])
    assert message in str(info.value)
    assert str(info.value).startswith(path)


def test_unknown_builtin_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="unknown profile 'RJ'"):
        builtin("RJ")
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profiles([str(tmp_path / "nope.toml")])
    broken = tmp_path / "broken.toml"
    broken.write_text("name = ")
    with pytest.raises(ProfileError, match="not TOML"):
        load_profiles([str(broken)])
