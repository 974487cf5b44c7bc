"""driver.two_drivers (BA 86 §3) and driver.unidentified (CONTRAN 938/2022 art. 3 VI)."""

from __future__ import annotations

import pytest

from tests.collector.rules.timeline import HOUR, MIN, Timeline, of

S = 1000
TWO = "driver.two_drivers"
UNID = "driver.unidentified"
#: 21:00 in Salvador (America/Bahia, UTC−3) on 02/03/2026
NIGHT = "2026-03-03T00:00:00.000Z"
#: 08:00 in Salvador
MORNING = "2026-03-02T11:00:00.000Z"


def _trip(start: str, line: str, moving: list[tuple[int, int]], end: int,
          swap_at: int | None = None) -> Timeline:
    tl = Timeline(start)
    tl.trip("V1", 0, "start", "T1", line)
    tl.slot("V1", 0, 1, "C1", "drive")
    for a, b in moving:
        tl.moving("V1", a, b, every_ms=30 * MIN)
    if swap_at is not None:
        tl.slot("V1", swap_at, 1, "C2", "drive")
        tl.slot("V1", swap_at, 2, "C1", "rest")
    tl.trip("V1", end, "end", "T1", line)
    return tl


def test_long_night_trip_with_one_driver() -> None:
    tl = _trip(NIGHT, "BA-LONG", [(0, 8 * HOUR)], 8 * HOUR + MIN)
    (f,) = of(tl.findings(), TWO)
    assert (f["start"], f["end"]) == (tl.ts(0), tl.ts(8 * HOUR + MIN))
    assert f["driver"] == "D1"
    assert f["trip"] == "T1"
    assert f["line"] == "BA-LONG"
    assert f["profile"] == "BA"
    assert f["basis"] == ["Decreto BA 4.342/1995 art. 86 §3"]
    d = f["details"]
    assert d["length_km"] == 526
    assert d["night_moving_min"] == 480  # 21:00 to 05:00 local, all of it night
    assert d["drivers"] == ["D1"]
    assert d["longest_stop_min"] == 0


def test_exactly_525_km_is_not_longer() -> None:
    assert of(_trip(NIGHT, "BA-525", [(0, 8 * HOUR)], 8 * HOUR + MIN).findings(), TWO) == []


def test_two_drivers_taking_turns() -> None:
    tl = _trip(NIGHT, "BA-LONG", [(0, 8 * HOUR)], 8 * HOUR + MIN, swap_at=4 * HOUR)
    assert of(tl.findings(), TWO) == []


@pytest.mark.parametrize(("moving_until", "found"), [(10 * HOUR, 0), (10 * HOUR + S, 1)])
def test_night_starts_at_18_local(moving_until: int, found: int) -> None:
    tl = _trip(MORNING, "BA-LONG", [(0, moving_until)], moving_until + MIN)
    got = of(tl.findings(), TWO)
    assert len(got) == found
    if found:
        assert got[0]["details"]["night_moving_min"] == round(S / MIN, 2)


@pytest.mark.parametrize(("stop", "found"), [(8 * HOUR, 0), (8 * HOUR - MIN, 1)])
def test_an_overnight_stop_of_8_hours(stop: int, found: int) -> None:
    tl = _trip(NIGHT, "BA-LONG", [(0, 4 * HOUR), (4 * HOUR + stop, 5 * HOUR + stop)],
               5 * HOUR + stop + MIN)
    assert len(of(tl.findings(), TWO)) == found


def test_not_checked_on_a_line_of_another_profile() -> None:
    # TO has no two-driver rule (docs/rules.md): the same night on a TO line
    tl = _trip(NIGHT, "TO-1", [(0, 8 * HOUR)], 8 * HOUR + MIN)
    assert of(tl.findings(), TWO) == []


def test_trip_still_running_is_judged_so_far() -> None:
    tl = _trip(NIGHT, "BA-LONG", [(0, 6 * HOUR)], 7 * HOUR)
    tl.records = [r for r in tl.records if r["kind"] != "trip" or r["event"] == "start"]
    (f,) = of(tl.findings(), TWO)
    assert f["end"] is None
    assert f["details"]["open"] is True


@pytest.mark.parametrize(("card_at", "found"), [(59 * S, 0), (60 * S, 1)])
def test_unidentified_after_60_seconds(card_at: int, found: int) -> None:
    tl = Timeline()
    for t in range(120):
        tl.speed("V1", t * S, 50)
    tl.slot("V1", card_at, 1, "C1", "drive")
    got = of(tl.findings(), UNID)
    assert len(got) == found
    if found:
        f = got[0]
        assert (f["start"], f["end"]) == (tl.ts(0), tl.ts(card_at))
        assert f["details"]["moving_s"] == 60
        assert f["driver"] is None
        assert f["basis"] == ["Resolução CONTRAN 938/2022 art. 3 VI"]


@pytest.mark.parametrize(("as_of", "end"), [(2 * HOUR + 10 * MIN, None),
                                            (2 * HOUR + 30 * MIN, 2 * HOUR)])
def test_no_card_at_all(as_of: int, end: int | None) -> None:
    # moving 2 h with slot 1 empty; the episode closes once stopped for 15 min (episode_gap_min)
    tl = Timeline()
    tl.trip("V1", 0, "start", "T1", "TO-1")
    tl.moving("V1", 0, 2 * HOUR)
    tl.speed("V1", as_of, 0)
    (f,) = of(tl.findings(), UNID)
    assert f["start"] == tl.ts(0)
    assert f["end"] == (None if end is None else tl.ts(end))
    assert f["details"]["moving_s"] == 7200
    assert f["basis"] == ["Resolução CONTRAN 938/2022 art. 3 VI", "Regulamento TO art. 107 IV"]
    assert of(tl.findings(), TWO) == []


def test_stops_inside_an_unidentified_episode_keep_counting() -> None:
    # 40 s moving, 5 min stopped, 20 s moving: 60 s of moving with slot 1 empty
    tl = Timeline()
    tl.speed("V1", 0, 40).speed("V1", 40 * S, 0)
    tl.speed("V1", 340 * S, 40).speed("V1", 360 * S, 0)
    tl.speed("V1", 2 * HOUR, 0)
    (f,) = of(tl.findings(), UNID)
    assert (f["start"], f["end"]) == (tl.ts(0), tl.ts(360 * S))
    assert f["details"]["moving_s"] == 60


@pytest.mark.parametrize(("until", "found"), [(HOUR, 0), (HOUR + S, 1)])
def test_night_follows_historical_daylight_saving(until: int, found: int) -> None:
    # Bahia kept summer time in 2011–2012: on 01/12/2011 local 18:00 is 20:00 UTC (UTC−2), not
    # 21:00. A trip moving from 19:00 UTC to 20:00 UTC never moves at night; one second more does.
    tl = _trip("2011-12-01T19:00:00.000Z", "BA-LONG", [(0, until)], until + MIN)
    got = of(tl.findings(), TWO)
    assert len(got) == found
