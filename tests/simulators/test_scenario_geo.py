"""The scenario's geometry and timestamps against hand values and the slow reference forms."""

from __future__ import annotations

import math

import pytest

from protocols.records import ms_to_ts, ts_to_ms
from simulators.scenario.geo import Polyline, bearing_deg, haversine_m, interpolate
from simulators.scenario.render import second_stamps


def test_haversine_along_a_meridian_and_the_equator() -> None:
    # one degree of a great circle = π/180 × 6 371 008.8 m = 111 195.08 m
    assert haversine_m((0.0, 0.0), (1.0, 0.0)) == pytest.approx(111_195.08, abs=0.01)
    assert haversine_m((0.0, 0.0), (0.0, 1.0)) == pytest.approx(111_195.08, abs=0.01)
    assert haversine_m((-23.0, -47.0), (-23.12, -47.0)) == pytest.approx(13_343.41, abs=0.01)


def test_bearings() -> None:
    assert bearing_deg((-23.0, -47.0), (-23.1, -47.0)) == pytest.approx(180.0)
    assert bearing_deg((0.0, 0.0), (0.0, 1.0)) == pytest.approx(90.0)
    assert bearing_deg((0.0, 0.0), (1.0, 0.0)) == pytest.approx(0.0)


def test_locate_is_the_spherical_interpolation() -> None:
    points = [(-23.5163, -46.6252), (-23.4620, -46.7560), (-23.1857, -46.8847)]
    line = Polyline(points)
    assert line.length_m == pytest.approx(
        haversine_m(points[0], points[1]) + haversine_m(points[1], points[2]))
    for fraction in (0.0, 0.1, 0.5, 0.77, 0.999):
        d = fraction * line.cumulative[1]
        lat, lon, course = line.locate(d)
        ref = interpolate(points[0], points[1], fraction)
        assert (lat, lon) == pytest.approx(ref, abs=1e-9)
        assert course == pytest.approx(bearing_deg(points[0], points[1]))
    assert line.locate(line.cumulative[1])[:2] == pytest.approx(points[1])  # at a vertex
    assert line.locate(-5)[:2] == pytest.approx(points[0])
    assert line.locate(line.length_m + 5)[:2] == pytest.approx(points[2])
    mid = line.locate(line.cumulative[1] + 1000)
    assert haversine_m(mid[:2], points[1]) == pytest.approx(1000, abs=1e-6)
    assert not math.isnan(mid[0])


def test_second_stamps_cross_midnight_like_ms_to_ts() -> None:
    start = ts_to_ms("2026-03-06T23:59:58.250Z")
    stamps = second_stamps(start)
    got = [next(stamps) for _ in range(5)]
    assert got == [ms_to_ts(start + 1000 * i) for i in range(5)]
    assert got[2] == "2026-03-07T00:00:00.250Z"
