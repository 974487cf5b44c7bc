"""What the engine knows about a vehicle and a trip at the current record (docs/rules.md, "How records are read").

Plain mutable objects with ``__slots__``: the engine updates them once per record, rules read them.
"""

from __future__ import annotations

import math
from typing import Any

from collector.registry import Line
from collector.rules.profile import Profile

NO_TIME = -(2**62)

#: (vehicle, trip, line, profile) as a finding records them.
Ctx = tuple[str, str | None, str | None, Profile]

#: When one driver is in slots of two vehicles at once, the busier activity wins.
PRIORITY = {"drive": 3, "work": 2, "available": 1, "rest": 0}


class Trip:
    """A trip in progress (from ``trip start`` to ``trip end`` or a replacement vehicle)."""

    __slots__ = ("id", "line", "line_id", "profile", "start_ms", "states", "vehicle")

    def __init__(self, trip_id: str, line_id: str, line: Line | None, profile: Profile,
                 start_ms: int, vehicle: str) -> None:
        self.id = trip_id
        self.line_id = line_id
        self.line = line
        self.profile = profile
        self.start_ms = start_ms
        self.vehicle = vehicle


class Vehicle:
    """The derived state of one vehicle: speed, moving, position, slots, trip, limit."""

    __slots__ = (
        "default_profile", "emitted", "gps_kmh", "gps_ms", "id", "kmh", "last_ms", "lat",
        "limit_kmh", "limit_source", "lon", "moving", "moving_since", "profile", "silent_ms",
        "slot_activity", "slot_driver", "speed_ms", "stop_kmh", "trip", "zones",
    )

    def __init__(self, vehicle_id: str, profile: Profile) -> None:
        self.id = vehicle_id
        self.default_profile = profile
        self.profile = profile
        self.stop_kmh = profile.stop_kmh
        self.kmh = 0.0
        self.speed_ms = NO_TIME
        self.gps_kmh = 0.0
        self.gps_ms = NO_TIME
        self.lat: float | None = None
        self.lon: float | None = None
        self.moving = False
        self.moving_since = NO_TIME
        self.slot_driver: list[str | None] = [None, None, None]
        self.slot_activity: list[str] = ["unknown", "unknown", "unknown"]
        self.trip: Trip | None = None
        self.zones: tuple[Any, ...] = ()
        self.limit_kmh = 0.0
        self.limit_source = "default"
        self.last_ms = NO_TIME
        #: what this vehicle last told the driver journeys: driver id → activity
        self.emitted: dict[str, str] = {}
        self.set_trip(None)

    def set_trip(self, trip: Trip | None) -> None:
        """Enter or leave a trip: the profile, line limit and speed zones follow it."""
        self.trip = trip
        self.profile = trip.profile if trip is not None else self.default_profile
        self.stop_kmh = self.profile.stop_kmh
        #: the registrador is silent (GPS speed counts instead) after this long without a speed
        self.silent_ms = int(self.profile.rules["equipment.registrador"].params.silent_s * 1000)
        line = trip.line if trip is not None else None
        self.zones = line.speed_zones if line is not None else ()
        self.update_limit()

    def base_limit(self) -> tuple[float, str]:
        """The line's limit, else the profile's default."""
        line = self.trip.line if self.trip is not None else None
        if line is not None and line.speed_limit_kmh is not None:
            return line.speed_limit_kmh, "line"
        params = self.profile.rules["speed.over_limit"].params
        return float(params.default_limit_kmh), "default"

    def update_limit(self) -> None:
        """The applicable limit: the lowest speed zone containing the position, else the base."""
        limit, source = self.base_limit()
        if self.zones and self.lat is not None and self.lon is not None:
            lat = self.lat
            for zone in self.zones:
                # 111,195 m per degree of latitude: a cheap lower bound of the distance first
                if abs(lat - zone.lat) * 111_195 > zone.radius_m:
                    continue
                if zone.limit_kmh < limit and distance_m(
                    self.lat, self.lon, zone.lat, zone.lon
                ) <= zone.radius_m:
                    limit, source = zone.limit_kmh, "zone"
        self.limit_kmh = limit
        self.limit_source = source

    def context(self) -> Ctx:
        """(vehicle, trip, line, profile) as a finding records them."""
        trip = self.trip
        if trip is None:
            return (self.id, None, None, self.profile)
        return (self.id, trip.id, trip.line_id, self.profile)


class Whereabouts:
    """Where a driver was during one activity segment: the (vehicle, trip, line, profile) in
    force from each instant on, so a finding takes those of the moment it became true."""

    __slots__ = ("changes",)

    def __init__(self, changes: list[tuple[int, Ctx]]) -> None:
        #: (from ms, context), in time order, at least one
        self.changes = changes

    @property
    def last(self) -> Ctx:
        """The context at the segment's end."""
        return self.changes[-1][1]

    def at(self, ms: int) -> Ctx:
        """The context in force at ``ms`` (the first one before the segment)."""
        found = self.changes[0][1]
        for start, ctx in self.changes:
            if start > ms:
                break
            found = ctx
        return found


def same_place(a: Ctx, b: Ctx) -> bool:
    """Whether two contexts name the same vehicle, trip and profile."""
    return a[0] == b[0] and a[1] == b[1] and a[3] is b[3]


class DriverState:
    """One driver across vehicles: where they are, their effective activity since when."""

    __slots__ = ("act", "id", "presence", "since", "vehicle", "where")

    def __init__(self, driver_id: str) -> None:
        self.id = driver_id
        #: vehicle id → the driver's activity in it
        self.presence: dict[str, str] = {}
        #: the effective activity (the busiest of ``presence``, rest when in no vehicle)
        self.act: str | None = None
        self.since = 0
        #: the vehicle the driver was last seen in (its trip and profile judge the driver)
        self.vehicle: Vehicle | None = None
        #: the driver's contexts since ``since`` (see :class:`Whereabouts`)
        self.where: list[tuple[int, Ctx]] = []


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance (haversine, mean Earth radius), enough for zone radii."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6_371_008.8 * math.asin(min(1.0, math.sqrt(h)))


def slot_activity(slot: int, declared: str, moving: bool, co_driver_available: bool) -> str:
    """A slot's effective activity (docs/rules.md): slot 1 moving drives; slot 2 moving is
    available from ADI 5322 (before it, declared rest counts); stopped, the declared activity.
    ``unknown`` counts as work (neither driving nor rest)."""
    if slot == 1:
        if moving:
            return "drive"
        return "work" if declared == "unknown" else declared
    if moving:
        if declared == "rest" and not co_driver_available:
            return "rest"
        return "work" if declared == "work" else "available"
    if declared in ("drive", "unknown"):
        return "work"
    return declared
