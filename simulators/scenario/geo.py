"""Great-circle geometry for a route: distances, bearings, and a point at a distance along a polyline.

Hand-rolled: the few formulas needed (haversine, initial bearing, spherical interpolation) are
short, and a geodesy library (pyproj, geographiclib) would be a heavy dependency for metres of
difference over a bus route. A sphere of the mean Earth radius is used throughout, so the
renderer, the player and the tests agree on every distance.
"""

from __future__ import annotations

import bisect
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


class Polyline:
    """A route as a chain of great-circle segments, addressed by distance from its start."""

    def __init__(self, points: Sequence[LatLon]) -> None:
        if len(points) < 2:
            raise ValueError("a polyline needs at least two points")
        self.points = list(points)
        self.cumulative = [0.0]
        for a, b in zip(self.points, self.points[1:], strict=False):
            self.cumulative.append(self.cumulative[-1] + haversine_m(a, b))
        self.bearings = [
            bearing_deg(a, b) for a, b in zip(self.points, self.points[1:], strict=False)
        ]

    @property
    def length_m(self) -> float:
        """Total length in metres."""
        return self.cumulative[-1]

    def locate(self, distance_m: float) -> tuple[float, float, float]:
        """(lat, lon, course) at a distance along the line, clamped to its ends."""
        s = min(max(distance_m, 0.0), self.length_m)
        i = bisect.bisect_right(self.cumulative, s) - 1
        i = min(max(i, 0), len(self.points) - 2)
        seg = self.cumulative[i + 1] - self.cumulative[i]
        fraction = 0.0 if seg <= 0 else (s - self.cumulative[i]) / seg
        lat, lon = interpolate(self.points[i], self.points[i + 1], fraction)
        return lat, lon, self.bearings[i]
