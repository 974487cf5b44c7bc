"""A scenario played on three ptys, read as the agent would, matches the file and the rendered records."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from protocols.records import Record, validate
from simulators.scenario import DATA_DIR
from simulators.scenario.render import render
from tests.simulators.scenario_reader import Played, play_and_read

SHORT = Path(__file__).parent.parent / "data" / "scenario" / "short.toml"

pytestmark = [pytest.mark.pty]

_DEVICE_FIELDS = ("raw", "device_seq")


def _strip(rec: Record) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in _DEVICE_FIELDS}


def _door_totals(records: list[Record]) -> dict[tuple[int, str], int]:
    totals: Counter[tuple[int, str]] = Counter()
    for rec in records:
        if rec["kind"] == "door":
            totals[(rec["door"], "boarded")] += rec["boarded"]
            totals[(rec["door"], "alighted")] += rec["alighted"]
    return dict(totals)


def _check_against_render(played: Played, rendered: list[Record]) -> None:
    """Registrador records equal the rendered ones; positions within NMEA's resolution."""
    assert played.returncode == 0, played.stderr
    for rec in played.registrador + played.gps + played.apc:
        validate(rec)
    want = [_strip(r) for r in rendered if r["kind"] in ("speed", "driver", "trip", "incident")]
    got = [_strip(r) for r in played.registrador]
    assert [(r["ts"], r["kind"]) for r in got] == [(r["ts"], r["kind"]) for r in want]
    for g, w in zip(got, want, strict=True):
        if w["kind"] != "speed":
            assert g == w
            continue
        assert abs(g["kmh"] - w["kmh"]) <= 0.01
        # the registrador integrates each second's speed over the second before it, the
        # renderer the mean of the two: they differ by half a second's distance while moving
        # and agree (to the metre) whenever the bus stands
        assert abs(g["odometer_m"] - w["odometer_m"]) <= w["kmh"] / 3.6 / 2 + 1
    positions = [r for r in rendered if r["kind"] == "position"]
    assert [r["ts"] for r in played.gps] == [r["ts"] for r in positions]
    for fix, exp in zip(played.gps, positions, strict=True):
        # NMEA carries 1e-5 minute (1.7e-7°); the rendered record is rounded to 1e-6°
        assert abs(fix["lat"] - exp["lat"]) <= 1.0e-6
        assert abs(fix["lon"] - exp["lon"]) <= 1.0e-6
        # knots to 0.001 against km/h rounded to 0.1
        assert abs(fix["kmh"] - exp["kmh"]) <= 0.06
    assert _door_totals(played.apc) == _door_totals(rendered)


def test_short_scenario_played_on_ptys_matches_file_and_render() -> None:
    played = play_and_read(SHORT, "TST0A00", doors=2, time_scale=1000)
    _check_against_render(played, render(SHORT))
    # Totals worked out by hand from tests/data/scenario/short.toml:
    speeds = [r for r in played.registrador if r["kind"] == "speed"]
    # 0.12° of latitude along one meridian = 0.12 × π/180 × 6 371 008.8 m = 13 343.4 m
    assert speeds[-1]["odometer_m"] - speeds[0]["odometer_m"] == 13_343
    # 4 stops: speed 0 for at least a minute, 4 times (the 3 points and the roadside stop)
    stops, run = 0, 0
    for rec in speeds:
        run = run + 1 if rec["kmh"] == 0 else 0
        stops += run == 60
    assert stops == 4
    # doors: door 1 boards 10 + 3 and lets 4 out; door 2 lets 4 + 5 out; 13 in, 13 out
    assert _door_totals(played.apc) == {(1, "boarded"): 13, (1, "alighted"): 4,
                                        (2, "boarded"): 0, (2, "alighted"): 9}
    # Which openings a poll catches, and the time the reader gives its door records, depend on
    # how fast the reader polls against the play (1000×: a 12-second opening lasts 12 ms);
    # test_scenario_devices.py checks them second by second without ptys. The counters are
    # cumulative, so the totals above do not depend on it.
    drivers = [(r["driver"], r["activity"]) for r in played.registrador
               if r["kind"] == "driver" and r["slot"] == 1]
    assert ("11111111111", "work") in drivers
    assert ("22222222222", "drive") in drivers
    assert [r["event"] for r in played.registrador if r["kind"] == "trip"] == ["start", "end"]
    assert [(r["cause"], r["carrier_fault"]) for r in played.registrador
            if r["kind"] == "incident"] == [("road_blocked", False)]


@pytest.mark.slow
def test_shipped_clean_scenario_played_on_ptys() -> None:
    path = DATA_DIR / "sp-clean.toml"
    played = play_and_read(path, "FRT1A01", doors=2, time_scale=2000)
    _check_against_render(played, render(path))
    # sp-clean.toml by hand: 38 + 6 boarded, 9 + 14 + 21 alighted
    totals = _door_totals(played.apc)
    assert totals[(1, "boarded")] + totals[(2, "boarded")] == 44
    assert totals[(1, "alighted")] + totals[(2, "alighted")] == 44


def test_play_in_a_thread_reports_its_ttys_and_stops_when_asked() -> None:
    """How the demo embeds the player: paths through on_ready, an early stop through should_stop."""
    import io
    import threading

    from simulators.scenario import load
    from simulators.scenario.play import PlayResult, play

    ready: dict[str, str] = {}
    result: list[PlayResult] = []
    stop = threading.Event()

    def second(t: int) -> None:
        if t == 300:
            stop.set()

    def run() -> None:
        result.append(play(load(SHORT), time_scale=2000, announce=io.StringIO(), lead_in_s=0.1,
                           tail_s=0.1, on_ready=ready.update, on_second=second,
                           should_stop=stop.is_set))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(60)
    assert sorted(ready) == ["apc", "gps", "registrador"]
    assert all(path.startswith("/dev/") for path in ready.values())
    assert result[0].interrupted
    assert result[0].seconds == 301  # seconds 0…300 played, then the stop was seen


def test_after_the_end_door_polls_are_answered_with_the_final_counts_while_held() -> None:
    """How the demo drains: after the last second the lines stay open and the sensors answer with
    the trip's totals (a poll every 0.1 s wall is one every 2,000 s of a trip played at 20,000x, so
    the last stop's passengers may still be in the sensors when the play ends). SHORT: 13 board
    and 13 alight in all (the scenario file)."""
    import io
    import threading
    import time

    import serial

    from protocols.apc import frames
    from simulators.scenario import load
    from simulators.scenario.play import PlayResult, play

    ready: dict[str, str] = {}
    result: list[PlayResult] = []
    ended, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def hold(polls: int) -> bool:
        seen.append(polls)
        ended.set()
        return not release.is_set()

    def run() -> None:
        result.append(play(load(SHORT), time_scale=20_000, announce=io.StringIO(), lead_in_s=0.1,
                           tail_s=0.0, on_ready=ready.update, hold=hold))

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert ended.wait(60)
        polls_at_end = seen[0]
        counts = {}
        with serial.Serial(ready["apc"], 19200, timeout=0.05) as port:
            for address in (1, 2):
                port.write(frames.encode_request(address))
                buf, deadline = bytearray(), time.monotonic() + 10
                frame = None
                while frame is None and time.monotonic() < deadline:
                    buf += port.read(64)
                    _, _, frame = frames.scan(buf)
                assert frame is not None
                assert frame.address == address
                counts[address] = frames.parse_counts(frame.data)
        deadline = time.monotonic() + 10
        while seen[-1] - polls_at_end < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen[-1] - polls_at_end == 2      # the two polls, counted as they were answered
    finally:
        release.set()
        worker.join(60)
    # the file's stops: door 1 boards 10 + 3 and lets 4 off, door 2 lets 4 + 5 off
    assert (counts[1].entered, counts[1].exited) == (13, 4)
    assert (counts[2].entered, counts[2].exited) == (0, 9)
    assert not counts[1].open
    assert not counts[2].open
    assert not result[0].interrupted
