"""equipment.registrador built by hand at the edges (docs/rules.md: silent while the GPS shows the
vehicle moving above 5 km/h for 60 s; faults, tamper, compartment, power loss; speeds more than
10 % apart for 5 min; SP 61 §2, CTB 230 IX, X, XIV)."""

from __future__ import annotations

from typing import Any

from tests.collector.rules.timeline import MIN
from tests.collector.rules.trip_fixture import SP_DAY, TripLine, X

RULE = "equipment.registrador"
SP_BASIS = ["Decreto SP 29.913/1989 art. 61 §2", "CTB art. 230 IX", "CTB art. 230 X",
            "CTB art. 230 XIV"]
S = 1000


def _silent(last_speed_s: int, back_s: int, gps_kmh: float = 60,
            position_first: bool = True) -> list[dict[str, Any]]:
    """Registrador and GPS at 60 km/h every 10 s; the registrador says nothing after
    ``last_speed_s`` until ``back_s``; the GPS goes on at ``gps_kmh`` to 400 s."""
    tl = TripLine(SP_DAY).slot("V1", 0, 1, "C1", "drive")
    for t in range(0, 410, 10):
        speaks = t <= last_speed_s or t >= back_s
        if speaks and not position_first:
            tl.speed("V1", t * S, 60)
        tl.at("V1", t * S, X, kmh=60 if t <= last_speed_s else gps_kmh)
        if speaks and position_first:
            tl.speed("V1", t * S, 60)
    if back_s % 10:
        tl.speed("V1", back_s * S, 60)
    return tl.findings_of(RULE)


def test_registrador_silent_while_the_gps_moves() -> None:
    (f,) = _silent(100, 300, position_first=False)
    assert (f["start"], f["end"]) == ("2026-03-02T10:01:40.000Z", "2026-03-02T10:05:00.000Z")
    assert f["details"]["cause"] == "silent"
    assert f["details"]["silent_s"] == 200.0
    assert (f["severity"], f["basis"], f["vehicle"]) == ("infraction", SP_BASIS, "V1")


def test_silent_for_60_seconds_exactly_and_just_under() -> None:
    (f,) = _silent(100, 160)                                # the GPS fix at 160 s comes first
    assert f["details"]["silent_s"] == 60.0
    assert _silent(100, 159) == []


def test_silent_while_the_gps_shows_the_bus_standing_is_fine() -> None:
    assert _silent(100, 400, gps_kmh=5) == []               # 5 km/h is not above 5


def _apart(reg_kmh: float, gps_kmh: float, seconds: int) -> list[dict[str, Any]]:
    """Registrador ``reg_kmh`` and GPS ``gps_kmh`` every 10 s for ``seconds``, then both 60."""
    tl = TripLine(SP_DAY).slot("V1", 0, 1, "C1", "drive")
    for t in range(0, seconds + 60, 10):
        apart = t < seconds
        tl.speed("V1", t * S, reg_kmh if apart else 60)
        tl.at("V1", t * S, X, kmh=gps_kmh if apart else 60)
    return tl.findings_of(RULE)


def test_speeds_more_than_10_percent_apart_for_5_minutes() -> None:
    (f,) = _apart(60, 70, 300)                              # 10/70 = 14.3 % for 5 min
    assert (f["start"], f["end"]) == ("2026-03-02T10:00:00.000Z", "2026-03-02T10:05:00.000Z")
    assert f["details"]["cause"] == "speed_disagreement"
    assert f["details"]["max_difference_pct"] == 14.3
    assert f["details"]["duration_min"] == 5.0
    assert _apart(60, 70, 290) == []                        # 4 min 50 s
    assert _apart(63, 70, 600) == []                        # exactly 10 % is not more


def test_faults_tamper_compartment_and_power_loss() -> None:
    tl = TripLine(SP_DAY).slot("V1", 0, 1, "C1", "work").speed("V1", 0, 0)
    tl.add("device", "V1", 10 * MIN, device="registrador", status="fault", detail="E12")
    tl.add("device", "V1", 20 * MIN, device="registrador", status="ok")
    tl.add("device", "V1", 30 * MIN, device="registrador", status="tamper")
    tl.add("device", "V1", 35 * MIN, device="registrador", status="compartment_open")
    tl.add("device", "V1", 40 * MIN, device="registrador", status="power_loss")
    tl.add("device", "V1", 45 * MIN, device="registrador", status="power_restored")
    tl.add("device", "V1", 50 * MIN, device="gps", status="fault")
    tl.add("device", "V1", 55 * MIN, device="registrador", status="fault")
    found = [(f["details"]["cause"], f["start"][11:19], f["end"] and f["end"][11:19])
             for f in tl.findings_of(RULE, as_of_ms=60 * MIN)]
    assert found == [
        ("fault", "10:10:00", "10:20:00"),
        ("tamper", "10:30:00", "10:30:00"),
        ("compartment_open", "10:35:00", "10:35:00"),
        ("power_loss", "10:40:00", "10:45:00"),
        ("fault", "10:55:00", None),                        # still open at as_of
    ]
