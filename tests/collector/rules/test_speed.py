"""speed.over_limit (CTB 61, 218): edges of duration, grade, limit source, tolerance, data gaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.rules import load_profiles
from tests.collector.rules.timeline import PROFILES, Timeline, of

S = 1000


def _trip(line: str = "SP-1") -> Timeline:
    tl = Timeline()
    tl.trip("V1", 0, "start", "T1", line).slot("V1", 0, 1, "C1", "drive")
    return tl


def _episode(tl: Timeline, over_kmh: float, seconds: int, after_kmh: float = 70,
             start_s: int = 10) -> Timeline:
    """70 km/h until ``start_s``, ``over_kmh`` for ``seconds`` samples at 1 Hz, then 70."""
    for t in range(1, start_s):
        tl.speed("V1", t * S, 70)
    for t in range(start_s, start_s + seconds):
        tl.speed("V1", t * S, over_kmh)
    for t in range(start_s + seconds, start_s + seconds + 5):
        tl.speed("V1", t * S, after_kmh)
    return tl


@pytest.mark.parametrize(("seconds", "expected"), [(9, 0), (10, 1), (11, 1)])
def test_min_duration_edge(seconds: int, expected: int) -> None:
    # 10 s is the minimum (docs/rules.md: for at least min_duration_s = 10)
    found = of(_episode(_trip(), 90, seconds).findings(), "speed.over_limit")
    assert len(found) == expected
    if expected:
        f = found[0]
        assert f["start"] == "2026-03-02T10:00:10.000Z"
        assert f["end"] == f"2026-03-02T10:00:{10 + seconds}.000Z"
        assert f["details"]["duration_s"] == seconds
        assert f["vehicle"] == "V1"
        assert f["driver"] == "D1"  # card C1 mapped through the registry
        assert f["trip"] == "T1"
        assert f["line"] == "SP-1"
        assert f["profile"] == "SP"
        assert f["severity"] == "infraction"
        assert f["basis"] == ["CTB art. 61", "CTB art. 218", "Decreto SP 29.913/1989 art. 71 I"]


def test_exactly_at_the_limit_is_no_episode() -> None:
    assert of(_episode(_trip(), 80, 30).findings(), "speed.over_limit") == []


@pytest.mark.parametrize(("kmh", "grade"), [
    (80.1, "média"),
    (96, "média"),        # exactly 20 % over 80
    (96.1, "grave"),
    (120, "grave"),       # exactly 50 % over
    (120.1, "gravíssima"),
])
def test_ctb_218_grade_edges(kmh: float, grade: str) -> None:
    (f,) = of(_episode(_trip(), kmh, 12).findings(), "speed.over_limit")
    assert f["details"]["grade"] == grade
    assert f["details"]["peak_kmh"] == kmh
    assert f["details"]["limit_kmh"] == 80


def test_one_finding_per_episode_with_peak_and_distance() -> None:
    tl = _trip()
    speeds = [85, 90, 100, 90, 85, 85, 85, 85, 85, 85, 85, 85]  # 12 s over 80
    for t, kmh in enumerate(speeds, start=1):
        tl.speed("V1", t * S, kmh)
    tl.speed("V1", 13 * S, 70)
    (f,) = of(tl.findings(), "speed.over_limit")
    assert f["details"]["peak_kmh"] == 100
    assert f["details"]["excess_pct"] == 25.0
    assert f["details"]["grade"] == "grave"
    # distance: each sample held 1 s: sum(speeds) km/h × 1 s = 1075 / 3.6 m
    assert f["details"]["distance_m"] == round(sum(speeds) / 3.6)


def test_speed_zone_then_line_then_default() -> None:
    tl = _trip()
    tl.add("position", "V1", 500, lat=-23.0, lon=-46.0)  # inside the 60 km/h zone
    for t in range(1, 15):
        tl.speed("V1", t * S, 70)
    tl.add("position", "V1", 15 * S + 500, lat=-23.5, lon=-46.5)  # far outside
    for t in range(15, 30):
        tl.speed("V1", t * S, 70)
    (f,) = of(tl.findings(), "speed.over_limit")
    assert f["details"]["limit_kmh"] == 60
    assert f["details"]["limit_source"] == "zone"
    assert f["start"] == "2026-03-02T10:00:01.000Z"
    # the position outside comes at 15.5 s: the 15 s sample is still judged against 60
    assert f["end"] == "2026-03-02T10:00:16.000Z"

    no_line_limit = _episode(_trip("SP-NOLIMIT"), 91, 12).findings()
    (f,) = of(no_line_limit, "speed.over_limit")
    assert (f["details"]["limit_kmh"], f["details"]["limit_source"]) == (90, "default")
    assert of(_episode(_trip("SP-NOLIMIT"), 90, 12).findings(), "speed.over_limit") == []


def test_outside_any_trip_uses_the_default_profile(tmp_path: Path) -> None:
    tl = Timeline()
    tl.slot("V1", 0, 1, "C1", "drive")
    (f,) = of(_episode(tl, 95, 12).findings("TO"), "speed.over_limit")
    assert f["profile"] == "TO"
    assert f["trip"] is None
    assert f["basis"][-1] == "Regulamento TO art. 104 VI e"
    assert f["details"]["limit_kmh"] == 90


def _tolerant_profiles(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    text = Path(PROFILES["SP"].source).read_text()
    copy = tmp_path / "sp-company.toml"
    copy.write_text(text.replace("enforcement_tolerance = false", "enforcement_tolerance = true"))
    return load_profiles([str(copy)])


@pytest.mark.parametrize(("kmh", "found"), [(87, 0), (87.1, 1), (118.2, 0), (118.3, 1)])
def test_enforcement_tolerance(tmp_path: Path, kmh: float, found: int) -> None:
    # −7 km/h up to 100 km/h: 87 → 80, not over the 80 km/h line; 87.1 → 80.1 is.
    # −7 % above 100 km/h, on a 110 km/h line: 118.2 × 0.93 = 109.93 is not over; 118.3 → 110.02 is.
    line = "SP-1" if kmh < 100 else "SP-110"
    limit_line = 80 if line == "SP-1" else 110
    profiles = _tolerant_profiles(tmp_path)
    tl = _episode(_trip(line), kmh, 12)
    got = of(tl.findings(profiles=profiles), "speed.over_limit")
    assert len(got) == found
    if found:
        considered = kmh - 7 if kmh <= 100 else kmh * 0.93
        assert got[0]["details"]["considered_kmh"] == round(considered, 1)
        assert got[0]["details"]["limit_kmh"] == limit_line
        assert got[0]["details"]["enforcement_tolerance"] is True


def test_registrador_silent_gps_speed_is_used() -> None:
    tl = _trip()
    for t in range(1, 11):
        tl.speed("V1", t * S, 70)
    for t in range(11, 201):
        tl.add("position", "V1", t * S, lat=-22.0, lon=-47.0, kmh=95)
    (f,) = of(tl.findings(), "speed.over_limit")
    # the last speed record is at 10 s; GPS speed counts once it is more than 60 s old: at 71 s
    assert f["start"] == "2026-03-02T10:01:11.000Z"
    assert f["end"] is None
    assert f["details"]["open"] is True
    assert f["details"]["duration_s"] == 200 - 71


def test_a_data_gap_closes_the_episode_at_its_last_sample() -> None:
    tl = _trip()
    for t in range(1, 21):
        tl.speed("V1", t * S, 95)
    tl.speed("V1", 120 * S, 95)  # 100 s later: more than silent_s = 60 s
    tl.speed("V1", 121 * S, 70)
    found = of(tl.findings(), "speed.over_limit")
    assert [(f["start"], f["end"]) for f in found] == [
        ("2026-03-02T10:00:01.000Z", "2026-03-02T10:00:20.000Z"),
    ]  # the second piece lasted 1 s: below the minimum


def test_ba_profile_citation_and_validity() -> None:
    tl = Timeline()
    tl.trip("V1", 0, "start", "T9", "BA-LONG").slot("V1", 0, 1, "C1", "drive")
    (f,) = of(_episode(tl, 95, 12).findings(), "speed.over_limit")
    assert f["profile"] == "BA"
    assert f["basis"][-1] == "Decreto BA 4.342/1995 art. 98 III c"
    # the BA text was revoked in 2001: computed and marked, severity unchanged
    assert f["details"]["outside_validity"] is True
    assert f["severity"] == "infraction"
