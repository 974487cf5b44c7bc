"""The scenario file format: mistakes give one clear ScenarioError; [expect] is checked as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulators.scenario import ScenarioError, load
from simulators.scenario.expect import problems
from simulators.scenario.model import Expect, ExpectedFinding

SHORT = Path(__file__).parent.parent / "data" / "scenario" / "short.toml"


def _variant(tmp_path: Path, old: str, new: str, registry: str | None = None) -> Path:
    text = SHORT.read_text(encoding="utf-8")
    assert old in text, old
    path = tmp_path / "short.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    reg = registry if registry is not None else (SHORT.parent / "short.registry.json").read_text(
        encoding="utf-8")
    (tmp_path / "short.registry.json").write_text(reg, encoding="utf-8")
    return path


# (what is changed, into what, a piece of the message)
BAD = [
    ("seed = 7", "seed = 7\ncolour = 1", "unknown key 'colour'"),
    ('point = "Seção Meio"', 'point = "Nowhere"', "point 'Nowhere' is not a point of the line"),
    ("{ door = 2, alighted = 4 }", "{ door = 2, alighted = 40 }", "more passengers alight"),
    ("{ door = 2, alighted = 4 }", "{ door = 3, alighted = 4 }", "door 3 is not one of 1..2"),
    ('trip = "T-TEST-1"', 'trip = "T-THIS-ID-IS-TOO-LONG"', "1-16 ASCII characters"),
    ("dwell_min = 4", "dwell_min = 0.3", "dwell_min"),
    ('driver = "D-2"', 'driver = "D-9"', "'D-9' is not a [[driver]] id"),
    ("cruise_kmh = 60\ndwell_min = 4", "dwell_min = 4", "missing 'cruise_kmh'"),
    ("speeds = [[0, 60], [-1, 40]]", "speeds = [[0, 60], [-1, 40], [-2, 30]]", "route order"),
    ('cause = "road_blocked"', 'cause = "aliens"', "cause = 'aliens' should be one of"),
    ("start = 2026-05-04T10:00:00Z", "start = 2026-05-04T10:00:00", "no UTC offset"),
    ('trip_end = "T-TEST-1"', 'trip_end = "T-OTHER"', "was not started"),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD, ids=[b[2] for b in BAD])
def test_bad_files_name_the_mistake(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=None) as caught:
        load(_variant(tmp_path, old, new))
    assert message in str(caught.value)
    assert str(caught.value).startswith("short.toml: ")


def test_registry_must_agree_with_the_scenario(tmp_path: Path) -> None:
    registry = (SHORT.parent / "short.registry.json").read_text(encoding="utf-8")
    moved = registry.replace('"lat": -23.06', '"lat": -23.07')
    with pytest.raises(ScenarioError, match="point 'Seção Meio' differs"):
        load(_variant(tmp_path, "seed = 7", "seed = 7", moved))
    other_card = registry.replace("22222222222", "22222222229")
    with pytest.raises(ScenarioError, match="driver D-2 is missing or has another card"):
        load(_variant(tmp_path, "seed = 7", "seed = 7", other_card))
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load(_variant(tmp_path, "seed = 7", "seed = 7", "{"))


def test_missing_file() -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load("/nonexistent/scenario.toml")


def _f(rule: str, severity: str) -> dict[str, str]:
    return {"rule": rule, "severity": severity}


def test_expect_listed_findings_must_appear() -> None:
    want = Expect(findings=(ExpectedFinding("trip.interruption", "infraction"),))
    assert problems(want, [_f("trip.interruption", "infraction")]) == []
    assert problems(want, [_f("trip.interruption", "report")]) == [
        "expected 1× trip.interruption (infraction), found 0"]
    assert problems(want, []) == ["expected 1× trip.interruption (infraction), found 0"]


def test_expect_absent_and_only() -> None:
    want = Expect(absent=("speed.over_limit",))
    assert problems(want, [_f("speed.over_limit", "warning")]) == [
        "expected no speed.over_limit, found 1"]
    assert problems(want, [_f("driver.workday", "infraction")]) == []
    only = Expect(findings=(ExpectedFinding("driver.two_drivers", None),), only=True)
    assert problems(only, [_f("driver.two_drivers", "infraction"),
                           _f("occupancy.index", "report")]) == []  # statistics are not held
    assert problems(only, [_f("driver.two_drivers", "infraction"),
                           _f("driver.workday", "infraction")]) == [
        "unexpected 1× driver.workday (infraction)"]


def test_speeds_past_the_leg_are_refused_when_worked_out(tmp_path: Path) -> None:
    from simulators.scenario.timeline import build

    path = _variant(tmp_path, "speeds = [[0, 60], [-1, 40]]", "speeds = [[0, 60], [20, 40]]")
    # the leg from the roadside stop (-23.09) to Terminal Sul (-23.12) is 0.03° = 3.34 km
    with pytest.raises(ScenarioError, match=r"speeds change at 20\.00 km.*3\.34 km"):
        build(load(path))
