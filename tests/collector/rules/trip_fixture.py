"""A registry with approved points and a trip timeline builder for the rules of part 2.

Places (all on latitude −23.0): terminal A at lon −46.0, stop P at −46.5, terminal B at −46.9
(radius 200 m, 150 m, 200 m); X at −46.3 is 30 km from every point.
"""

from __future__ import annotations

from typing import Any, Self

from collector.registry import Registry
from collector.rules import evaluate
from tests.collector.rules.timeline import MIN, PROFILES, Timeline

A = (-23.0, -46.0)
P = (-23.0, -46.5)
B = (-23.0, -46.9)
X = (-23.0, -46.3)
#: 100 m from terminal A (inside its 200 m radius), 300 m from it (outside)
NEAR_A = (-23.0, -46.0 + 100 / 102_470)
OFF_A = (-23.0, -46.0 + 300 / 102_470)

_POINTS = [
    {"name": "Terminal A", "kind": "terminal", "lat": A[0], "lon": A[1], "radius_m": 200},
    {"name": "Parada P", "kind": "parada", "lat": P[0], "lon": P[1], "radius_m": 150},
    {"name": "Terminal B", "kind": "terminal", "lat": B[0], "lon": B[1], "radius_m": 200},
]


def _line(line_id: str, profile: str, service: str, **extra: Any) -> dict[str, Any]:
    return {"id": line_id, "profile": profile, "service": service, "length_km": 100,
            "points": _POINTS, **extra}


REGISTRY = Registry.from_dict({
    "lines": [
        _line("SP-R", "SP", "rodoviario"), _line("SP-S", "SP", "suburbano"),
        _line("SP-S-NO", "SP", "suburbano", standing_allowed=False),
        _line("BA-R", "BA", "rodoviario"), _line("BA-U", "BA", "urbano"),
        _line("TO-R", "TO", "rodoviario"), _line("TO-S", "TO", "semiurbano"),
        _line("TO-R-STAND", "TO", "rodoviario", standing_allowed=True),
    ],
    "vehicles": [
        {"id": "V1", "seats": 40, "capacity": 50},
        {"id": "V2", "seats": 40, "capacity": 50},
        {"id": "V3", "seats": 40, "capacity": 60},
    ],
    "drivers": [{"id": "D1", "card": "C1"}, {"id": "D2", "card": "C2"}],
})

#: Starts inside each profile's validity: SP and TO today, BA before its revocation (2001).
#: Both before 2012 would have no driver-time rules; these tests filter by rule anyway.
SP_DAY = "2026-03-02T10:00:00.000Z"
BA_DAY = "2000-03-01T10:00:00.000Z"
TO_DAY = "2026-03-02T10:00:00.000Z"
DAY = {"SP": SP_DAY, "BA": BA_DAY, "TO": TO_DAY}


class TripLine(Timeline):
    """A timeline with places: ``at`` a place (a position without GPS speed)."""

    def add(self, kind: str, vehicle: str, offset_ms: int, **fields: Any) -> Self:
        """Any record."""
        super().add(kind, vehicle, offset_ms, **fields)
        return self

    def speed(self, vehicle: str, offset_ms: int, kmh: float) -> Self:
        """A registrador speed sample."""
        super().speed(vehicle, offset_ms, kmh)
        return self

    def slot(self, vehicle: str, offset_ms: int, slot: int, card: str | None,
             activity: str) -> Self:
        """A driver record."""
        super().slot(vehicle, offset_ms, slot, card, activity)
        return self

    def moving(self, vehicle: str, start_ms: int, end_ms: int, kmh: float = 80,
               every_ms: int = 10 * MIN) -> Self:
        """The vehicle moves from ``start_ms`` and is stopped at ``end_ms``."""
        super().moving(vehicle, start_ms, end_ms, kmh, every_ms)
        return self

    def at(self, vehicle: str, offset_ms: int, place: tuple[float, float],
           kmh: float | None = None) -> Self:
        """A GPS fix at a place (with GPS speed only when given)."""
        extra = {} if kmh is None else {"kmh": kmh}
        self.add("position", vehicle, offset_ms, lat=place[0], lon=place[1], **extra)
        return self

    def start_trip(self, vehicle: str, offset_ms: int, line: str, scheduled_ms: int | None,
                   trip: str = "T1") -> Self:
        """``trip start`` with its scheduled departure (offset), or none."""
        extra = {} if scheduled_ms is None else {"scheduled": self.ts(scheduled_ms)}
        self.add("trip", vehicle, offset_ms, event="start", trip=trip, line=line, **extra)
        return self

    def door(self, vehicle: str, offset_ms: int, *, door: int = 1, is_open: bool = False,
             boarded: int = 0, alighted: int = 0) -> Self:
        """A door record."""
        self.add("door", vehicle, offset_ms, door=door, open=is_open, boarded=boarded,
                 alighted=alighted)
        return self

    def findings_of(self, rule: str, as_of_ms: int | None = None,
                    profile: str = "SP") -> list[dict[str, Any]]:
        """The findings of one rule over this timeline."""
        as_of = None if as_of_ms is None else self.t0 + as_of_ms
        found = evaluate(REGISTRY, PROFILES, self.records, profile, as_of)
        return [f for f in found if f["rule"] == rule]


def departed(line: str, profile: str = "SP", vehicle: str = "V1", boarded: int = 0) -> TripLine:
    """D1 at the wheel, at terminal A from 0; trip T1 scheduled at 30 min, boarding at 20 min;
    departs at 30 min and drives at 80 km/h (samples every 10 min) until 60 min, where it stops
    at X (away from every point); positions without GPS speed."""
    tl = TripLine(DAY[profile])
    tl.slot(vehicle, 0, 1, "C1", "work").speed(vehicle, 0, 0).at(vehicle, 0, A)
    tl.start_trip(vehicle, 1 * MIN, line, 30 * MIN)
    if boarded:
        tl.door(vehicle, 20 * MIN, boarded=boarded)
    tl.moving(vehicle, 30 * MIN, 60 * MIN)
    tl.at(vehicle, 59 * MIN, X)
    return tl
