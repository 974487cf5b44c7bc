"""Great-circle geometry for a route: distances, bearings, and a point at a distance along a polyline.

Hand-rolled: the few formulas needed (haversine, initial bearing, spherical interpolation) are
short, and a geodesy library (pyproj, geographiclib) would be a heavy dependency for metres of
difference over a bus route. A sphere of the mean Earth radius is used throughout, so the
renderer, the player and the tests agree on every distance.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

#: Mean Earth radius (IUGG), metres.
EARTH_RADIUS_M = 6_371_008.8

LatLon = tuple[float, float]


def haversine_m(a: LatLon, b: LatLon) -> float:
    """Great-circle distance in metres between two (lat, lon) points in degrees."""
    lat1, lon1 = math.radians(a[0]), math.radians(a[1])
    lat2, lon2 = math.radians(b[0]), math.radians(b[1])
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def bearing_deg(a: LatLon, b: LatLon) -> float:
    """Initial great-circle bearing from a to b, degrees clockwise from north in [0, 360)."""
    lat1, lat2 = math.radians(a[0]), math.radians(b[0])
    dlon = math.radians(b[1] - a[1])
    x = math.sin(dlon) * math.cos(lat2)
    y = math.cos(lat1) * math.sin(lat2) - math.sin(lat1) * math.cos(lat2) * math.cos(dlon)
    return math.degrees(math.atan2(x, y)) % 360.0


def interpolate(a: LatLon, b: LatLon, fraction: float) -> LatLon:
    """The point a given fraction of the way from a to b along the great circle."""
    d = haversine_m(a, b) / EARTH_RADIUS_M
    if d < 1e-12:
        return a
    lat1, lon1 = math.radians(a[0]), math.radians(a[1])
    lat2, lon2 = math.radians(b[0]), math.radians(b[1])
    sa = math.sin((1 - fraction) * d) / math.sin(d)
    sb = math.sin(fraction * d) / math.sin(d)
    x = sa * math.cos(lat1) * math.cos(lon1) + sb * math.cos(lat2) * math.cos(lon2)
    y = sa * math.cos(lat1) * math.sin(lon1) + sb * math.cos(lat2) * math.sin(lon2)
    z = sa * math.sin(lat1) + sb * math.sin(lat2)
    return math.degrees(math.atan2(z, math.hypot(x, y))), math.degrees(math.atan2(y, x))


def _unit(p: LatLon) -> tuple[float, float, float]:
    lat, lon = math.radians(p[0]), math.radians(p[1])
    return math.cos(lat) * math.cos(lon), math.cos(lat) * math.sin(lon), math.sin(lat)


class Polyline:
    """A route as a chain of great-circle segments, addressed by distance from its start.

    Each segment's end points are kept as unit vectors with the angle between them, so that
    :meth:`locate` (called once per second of a trip) is a spherical interpolation of two
    precomputed vectors, the same result as :func:`interpolate`.
    """

    def __init__(self, points: Sequence[LatLon]) -> None:
        if len(points) < 2:
            raise ValueError("a polyline needs at least two points")
        self.points = list(points)
        self.cumulative = [0.0]
        for a, b in itertools.pairwise(self.points):
            self.cumulative.append(self.cumulative[-1] + haversine_m(a, b))
        self.bearings = [bearing_deg(a, b) for a, b in itertools.pairwise(self.points)]
        self._segments = []
        for (a, b), start, end in zip(itertools.pairwise(self.points), self.cumulative,
                                      self.cumulative[1:], strict=False):
            angle = (end - start) / EARTH_RADIUS_M
            self._segments.append((_unit(a), _unit(b), angle, math.sin(angle)))

    @property
    def length_m(self) -> float:
        """Total length in metres."""
        return self.cumulative[-1]

    def locate(self, distance_m: float) -> tuple[float, float, float]:
        """(lat, lon, course) at a distance along the line, clamped to its ends."""
        s = min(max(distance_m, 0.0), self.length_m)
        i = bisect.bisect_right(self.cumulative, s) - 1
        i = min(max(i, 0), len(self.points) - 2)
        (ax, ay, az), (bx, by, bz), angle, sin_angle = self._segments[i]
        if sin_angle < 1e-12:
            lat, lon = self.points[i]
            return lat, lon, self.bearings[i]
        fraction = (s - self.cumulative[i]) / (self.cumulative[i + 1] - self.cumulative[i])
        sa = math.sin((1 - fraction) * angle) / sin_angle
        sb = math.sin(fraction * angle) / sin_angle
        x, y, z = sa * ax + sb * bx, sa * ay + sb * by, sa * az + sb * bz
        return (math.degrees(math.atan2(z, math.hypot(x, y))), math.degrees(math.atan2(y, x)),
                self.bearings[i])
