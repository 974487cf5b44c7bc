"""Scenarios rendered to records: totals worked out by hand from the files, doors, determinism, the law."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import tomllib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from protocols.records import Record, ts_to_ms, validate
from simulators.scenario import DATA_DIR, load, shipped
from simulators.scenario.render import render

SHORT = Path(__file__).parent.parent / "data" / "scenario" / "short.toml"
SCENARIOS = [*shipped(), SHORT]

# Figures worked out by hand from each file's [[stop]] tables.
HAND = {
    # 38 + 6 in; 9 + 14 + 21 out; 3 stops
    "sp-clean": {"boarded": 44, "alighted": 44, "stops": 3, "door_opens": 5},
    # 41 in at Barra Funda; 18 + 23 out at Sorocaba; the breakdown is a stop without doors
    "sp-breakdown": {"boarded": 41, "alighted": 41, "stops": 3, "door_opens": 3},
    # 36 + 8 + 20 + 6 + 2 in; 5 + 20 + 12 + 4 + 17 + 14 out; 6 stops; doors opened:
    # Salvador 1, Feira 2, Milagres 1, Jequié 2, Poções 2, Vitória da Conquista 2
    "ba-night": {"boarded": 72, "alighted": 72, "stops": 6, "door_opens": 10},
    # 10 + 3 in; 4 + 4 + 5 out; 4 stops (one at the roadside)
    "short": {"boarded": 13, "alighted": 13, "stops": 4, "door_opens": 5},
}


def _hav(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Haversine on the IUGG mean radius, written here independently of simulators.scenario.geo."""
    r = 6_371_008.8
    p1, p2 = math.radians(a[0]), math.radians(b[0])
    dp, dl = p2 - p1, math.radians(b[1] - a[1])
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(math.sqrt(h))


def _route_m(path: Path) -> float:
    """The route length from the file: its stops and via points in order."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    points = {p["name"]: (p["lat"], p["lon"]) for p in doc["line"]["point"]}
    chain: list[tuple[float, float]] = []
    for stop in doc["stop"]:
        chain += [(v[0], v[1]) for v in stop.get("via", [])]
        chain.append(points[stop["point"]] if "point" in stop else (stop["lat"], stop["lon"]))
    return sum(_hav(a, b) for a, b in itertools.pairwise(chain))


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Record]]:
    """Each scenario rendered once."""
    return {load(p).name: render(p) for p in SCENARIOS}


def _kind(records: list[Record], kind: str) -> list[Record]:
    return [r for r in records if r["kind"] == kind]


def _stops(speeds: list[Record]) -> int:
    """Standstills of a minute or more."""
    count, run = 0, 0
    for rec in speeds:
        run = run + 1 if rec["kmh"] == 0 else 0
        count += run == 60
    return count


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_totals_match_the_file(path: Path, rendered: dict[str, list[Record]]) -> None:
    records = rendered[path.stem]
    hand = HAND[path.stem]
    speeds = _kind(records, "speed")
    doors = _kind(records, "door")
    assert sum(r["boarded"] for r in doors) == hand["boarded"]
    assert sum(r["alighted"] for r in doors) == hand["alighted"]
    assert _stops(speeds) == hand["stops"]
    assert sum(r["open"] for r in doors) == hand["door_opens"]
    travelled = speeds[-1]["odometer_m"] - speeds[0]["odometer_m"]
    assert abs(travelled - _route_m(path)) <= 1.0
    # the integral of the speed agrees with the odometer (trapezoids of 1 s, km/h → m/s)
    integral = sum((a["kmh"] + b["kmh"]) / 2 / 3.6 for a, b in itertools.pairwise(speeds))
    assert abs(integral - travelled) <= travelled * 0.001 + 2
    # one speed and one position record per second, from the first second to the last
    start = ts_to_ms(speeds[0]["ts"])
    assert [ts_to_ms(r["ts"]) for r in speeds] == [start + 1000 * i for i in range(len(speeds))]
    assert [r["ts"] for r in _kind(records, "position")] == [r["ts"] for r in speeds]


def test_short_distance_by_hand(rendered: dict[str, list[Record]]) -> None:
    speeds = _kind(rendered["short"], "speed")
    # 0.12° along the meridian 47° W: 0.12 × π/180 × 6 371 008.8 m = 13 343.4 m
    assert speeds[0]["odometer_m"] == 1_000_000
    assert speeds[-1]["odometer_m"] == 1_013_343
    first, last = _kind(rendered["short"], "position")[0], _kind(rendered["short"], "position")[-1]
    assert (first["lat"], first["lon"]) == (-23.0, -47.0)
    assert (last["lat"], last["lon"]) == (-23.12, -47.0)


def test_registry_lengths() -> None:
    """The Bahia line is over 525 km by its registry; the polylines never exceed the registry."""
    for path in shipped():
        sc = load(path)
        assert _route_m(path) <= sc.line["length_km"] * 1000
    assert load(DATA_DIR / "ba-night.toml").line["length_km"] > 525


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_records_are_valid_and_in_time_order(path: Path, rendered: dict[str, list[Record]]) -> None:
    records = rendered[path.stem]
    for rec in records:
        validate(rec)
    times = [ts_to_ms(r["ts"]) for r in records]
    assert times == sorted(times)


def _timeline(records: list[Record]) -> list[tuple[int, Record]]:
    return [(ts_to_ms(r["ts"]), r) for r in records]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_doors_open_only_when_stopped(path: Path, rendered: dict[str, list[Record]]) -> None:
    speed_at = {r["ts"]: r["kmh"] for r in _kind(rendered[path.stem], "speed")}
    open_since: dict[int, int] = {}
    for ms, rec in _timeline(rendered[path.stem]):
        if rec["kind"] == "door":
            if rec["open"]:
                open_since[rec["door"]] = ms
            else:
                opened = open_since.pop(rec["door"])
                assert all(kmh == 0 for ts, kmh in speed_at.items()
                           if opened <= ts_to_ms(ts) <= ms), f"door {rec['door']} at {rec['ts']}"
    assert not open_since  # every door that opened closed again


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_nobody_alights_who_did_not_board(path: Path, rendered: dict[str, list[Record]]) -> None:
    on_board = 0
    for rec in _kind(rendered[path.stem], "door"):
        on_board += rec["boarded"] - rec["alighted"]
        assert on_board >= 0
    assert on_board == 0


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_a_card_is_in_slot_1_whenever_the_bus_moves(path: Path,
                                                    rendered: dict[str, list[Record]]) -> None:
    slot1: str | None = None
    for rec in rendered[path.stem]:
        if rec["kind"] == "driver" and rec["slot"] == 1:
            slot1 = rec["driver"]
        elif rec["kind"] == "speed" and rec["kmh"] > 0:
            assert slot1 is not None, rec["ts"]


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.stem)
def test_speeds_within_line_and_zone_limits(path: Path, rendered: dict[str, list[Record]]) -> None:
    line = load(path).line
    for rec in _kind(rendered[path.stem], "position"):
        assert rec["kmh"] <= line["speed_limit_kmh"]
        for zone in line.get("speed_zones", []):
            if _hav((rec["lat"], rec["lon"]), (zone["lat"], zone["lon"])) <= zone["radius_m"]:
                assert rec["kmh"] <= zone["limit_kmh"], rec["ts"]


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.stem)
def test_departs_on_time_from_the_terminal(path: Path, rendered: dict[str, list[Record]]) -> None:
    records = rendered[path.stem]
    start = _kind(records, "trip")[0]
    assert start["event"] == "start"
    moving = next(r for r in _kind(records, "speed")
                  if r["kmh"] >= 3 and ts_to_ms(r["ts"]) > ts_to_ms(start["ts"]))
    late_s = (ts_to_ms(moving["ts"]) - ts_to_ms(start["scheduled"])) / 1000
    assert 0 <= late_s <= 10 * 60
    terminal = next(p for p in load(path).line["points"] if p["kind"] == "terminal")
    first = _kind(records, "position")[0]
    # at the terminal from the first record (over 10 min before the scheduled departure)
    assert _hav((first["lat"], first["lon"]), (terminal["lat"], terminal["lon"])) < 1
    assert ts_to_ms(start["scheduled"]) - ts_to_ms(first["ts"]) >= 10 * 60_000


def _driving_blocks(records: list[Record]) -> tuple[float, float]:
    """Longest continuous driving and longest driving between 30-min rests, in hours."""
    rest_started: int | None = None
    continuous = block = longest = longest_block = 0.0
    previous: int | None = None
    for ms, rec in _timeline(records):
        if rec["kind"] == "driver" and rec["slot"] == 1:
            if rec["activity"] == "rest":
                rest_started = ms
            elif rest_started is not None:
                rest_min = (ms - rest_started) / 60_000
                continuous = 0.0 if rest_min >= 5 else continuous
                block = 0.0 if rest_min >= 30 else block
                rest_started = None
        if rec["kind"] == "speed":
            if previous is not None and rec["kmh"] >= 3:
                continuous += (ms - previous) / 3_600_000
                block += (ms - previous) / 3_600_000
            previous = ms
            longest, longest_block = max(longest, continuous), max(longest_block, block)
    return longest, longest_block


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.stem)
def test_drivers_take_their_breaks(path: Path, rendered: dict[str, list[Record]]) -> None:
    """Continuous driving ≤ 5 h 30 and never 4 h of driving without 30 min of rest (docs/rules.md)."""
    continuous, block = _driving_blocks(rendered[path.stem])
    assert continuous <= 5.5
    assert block <= 4.0


def test_bahia_night_trip_one_driver_no_overnight_stop(rendered: dict[str, list[Record]]) -> None:
    records = rendered["ba-night"]
    cards = {r["driver"] for r in _kind(records, "driver") if r["driver"] is not None}
    assert cards == {"07700112233"}
    bahia = ZoneInfo("America/Bahia")
    hours = {datetime.fromtimestamp(ts_to_ms(r["ts"]) / 1000, tz=UTC).astimezone(bahia).hour
             for r in _kind(records, "speed") if r["kmh"] >= 3}
    assert hours <= {18, 19, 20, 21, 22, 23, 0, 1, 2, 3, 4, 5}  # moving only at night
    longest_stop = max_run = 0
    for rec in _kind(records, "speed"):
        max_run = max_run + 1 if rec["kmh"] < 3 else 0
        longest_stop = max(longest_stop, max_run)
    assert longest_stop < 8 * 3600


def test_breakdown_stands_130_minutes_away_from_every_point(
        rendered: dict[str, list[Record]]) -> None:
    sc = load(DATA_DIR / "sp-breakdown.toml")
    records = rendered["sp-breakdown"]
    incident = _kind(records, "incident")[0]
    assert (incident["cause"], incident["carrier_fault"]) == ("breakdown", True)
    at = ts_to_ms(incident["ts"])
    speeds = _kind(records, "speed")
    stopped = [ts_to_ms(r["ts"]) for r in speeds if r["kmh"] == 0]
    # the standstill around the incident: consecutive zero-speed seconds
    before = [ms for ms in stopped if ms <= at]
    run_start = at
    while run_start - 1000 in set(before):
        run_start -= 1000
    zero = set(stopped)
    run_end = at
    while run_end + 1000 in zero:
        run_end += 1000
    assert (run_end - run_start) / 60_000 == pytest.approx(130, abs=0.1)
    where = next(r for r in _kind(records, "position") if r["ts"] == incident["ts"])
    for point in sc.line["points"]:
        assert _hav((where["lat"], where["lon"]), (point["lat"], point["lon"])) > point["radius_m"]


def test_rendering_is_deterministic_and_seeded(tmp_path: Path) -> None:
    assert render(SHORT) == render(SHORT)
    text = SHORT.read_text(encoding="utf-8").replace("seed = 7", "seed = 8")
    other = tmp_path / "short.toml"
    other.write_text(text, encoding="utf-8")
    (tmp_path / "short.registry.json").write_text(
        (SHORT.parent / "short.registry.json").read_text(encoding="utf-8"), encoding="utf-8")
    a, b = render(SHORT), render(other)
    assert [r["kmh"] for r in _kind(a, "speed")] != [r["kmh"] for r in _kind(b, "speed")]
    assert _kind(a, "speed")[-1]["odometer_m"] == _kind(b, "speed")[-1]["odometer_m"]
    events = ("door", "driver", "trip", "incident")
    assert Counter(r["kind"] for r in a if r["kind"] in events) == Counter(
        r["kind"] for r in b if r["kind"] in events)


def _frota(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frota", *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_list_and_render(tmp_path: Path) -> None:
    listed = _frota("sim", "scenario", "list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "ba-night", "sp-breakdown", "sp-clean"]
    out = tmp_path / "short.jsonl"
    done = _frota("sim", "scenario", "render", str(SHORT), "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == render(SHORT)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    missing = _frota("sim", "scenario", "render", "no-such-scenario")
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1
    assert "no shipped scenario" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[scenario\n", encoding="utf-8")
    done = _frota("sim", "scenario", "render", str(bad))
    assert done.returncode == 1
    assert "not valid TOML" in done.stderr
    assert "Traceback" not in done.stderr


def _implemented_rules() -> set[str]:
    from collector.rules.pipeline import implemented_rules

    return implemented_rules()


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.stem)
def test_frota_check_finds_what_the_law_expects(path: Path, tmp_path: Path) -> None:
    from simulators.scenario.expect import problems
    from tests.services import require

    sc = load(path)
    records = tmp_path / "records.jsonl"
    assert _frota("sim", "scenario", "render", str(path), "-o", str(records)).returncode == 0
    done = _frota("check", "--registry", str(sc.registry_path), str(records))
    assert done.returncode == 0, done.stderr
    findings: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines()]
    missing = [f.rule for f in sc.expect.findings if f.rule not in _implemented_rules()]
    found = problems(sc.expect, findings)
    if missing and found:
        require(False, f"the rules engine does not implement {', '.join(missing)} yet")
    assert found == [], findings
