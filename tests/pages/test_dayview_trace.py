"""The *Disco do dia*'s trace of a day's samples (collector/web/dayview.py ``_trace``) on a hand
series with a repeated millisecond and a gap longer than a minute: each figure worked out by
hand from docs/rules.md's reading (a sample holds until the next, for at most 60 s)."""

from __future__ import annotations

from datetime import date
from zoneinfo import ZoneInfo

from collector.web.dayview import VehicleDay, _trace
from collector.web.localtime import Day

DAY = Day.of(date(2026, 3, 2), ZoneInfo("America/Sao_Paulo"))
T0 = DAY.lo_ms


def test_trace_of_a_hand_series() -> None:
    out = VehicleDay("V", DAY)
    samples = [(T0, 10.0), (T0 + 1000, 20.0), (T0 + 1000, 30.0),    # one millisecond twice
               (T0 + 100_000, 50.0),                                   # 99 s later: a gap
               (T0 + 101_000, 0.0)]
    _trace(out, samples, 5.0)
    # distance: 10 km/h for 1 s, then (same ms: nothing; gap: nothing) 50 km/h for 1 s
    assert out.distance_km == (10 * 1000 + 50 * 1000) / 3_600_000
    assert out.moving_ms == 2000                    # 10 km/h for 1 s, 50 km/h for 1 s (>= 5)
    assert out.minutes[0] == (30.0, 10.0, True)
    assert out.minutes[1] == (50.0, 0.0, True)
    assert out.minutes[2:] == [None] * (1440 - 2)
    assert out.distance == [(T0, 10_000 / 3_600_000), (T0 + 60_000, 60_000 / 3_600_000)]
    assert (out.max_kmh, out.max_at_ms) == (50.0, T0 + 100_000)


def test_trace_of_no_samples() -> None:
    out = VehicleDay("V", DAY)
    _trace(out, [], 5.0)
    assert out.minutes == [None] * 1440
    assert (out.max_kmh, out.distance, out.distance_km, out.moving_ms) == (None, [], 0.0, 0)
