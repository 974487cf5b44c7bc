"""What a scenario is (docs/scenarios.md): frozen dataclasses for the vehicle, line, itinerary, people.

:mod:`simulators.scenario.load` reads a TOML file into them and checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocols.records import ACTIVITIES

POINT_KINDS = ("terminal", "secao", "parada", "apoio")
SEVERITIES = ("infraction", "warning", "deadline", "report")
#: Activities a driver can declare while stopped or as co-driver (``drive`` is automatic).
DECLARED = tuple(a for a in ACTIVITIES if a not in ("drive", "unknown"))


class ScenarioError(ValueError):
    """A scenario file that cannot be played; the message says where and what to fix."""


@dataclass(frozen=True)
class Point:
    """An approved point of the line (registry ``points``)."""

    name: str
    kind: str
    lat: float
    lon: float
    radius_m: float = 150.0


@dataclass(frozen=True)
class Driver:
    """A driver: the registry id and the card number the registrador reports."""

    id: str
    card: str


@dataclass(frozen=True)
class DoorFlow:
    """Passengers through one door during one stop (alighting first, then boarding)."""

    door: int
    boarded: int = 0
    alighted: int = 0


@dataclass(frozen=True)
class Incident:
    """An incident keyed in on the console during a stop."""

    cause: str
    carrier_fault: bool | None
    after_s: int


@dataclass(frozen=True)
class TripStart:
    """A trip started on the console before the vehicle leaves a stop."""

    trip: str
    scheduled_ms: int


@dataclass(frozen=True)
class Stop:
    """A stop of the itinerary, with the leg that leads to it from the previous stop."""

    index: int
    name: str
    lat: float
    lon: float
    point: Point | None
    via: tuple[tuple[float, float], ...]
    speeds: tuple[tuple[float, float], ...]  # (km into the leg, cruise km/h), first at 0
    dwell_s: int
    doors_after_s: int | None  # when the doors open after arriving (None: the dynamics' default)
    activity: str
    co_activity: str
    driver: str | None  # a driver id to insert in slot 1; "" removes the card; None: no change
    co_driver: str | None
    trip_start: TripStart | None
    trip_end: str | None
    doors: tuple[DoorFlow, ...]
    incident: Incident | None

    @property
    def label(self) -> str:
        """How messages name this stop."""
        return f"stop {self.index + 1} ({self.name})"


@dataclass(frozen=True)
class Dynamics:
    """How the bus accelerates and how long things take at a stop."""

    accel_ms2: float = 0.6
    decel_ms2: float = 0.8
    jitter_kmh: float = 1.5
    door_open_after_s: int = 10
    passenger_s: float = 3.0
    door_close_after_s: int = 5
    moving_co_activity: str = "available"


@dataclass(frozen=True)
class DeviceEvent:
    """A device status change at a time from the start (fault, tamper, compartment opened…)."""

    at_s: int
    device: str
    status: str
    detail: str | None


@dataclass(frozen=True)
class ExpectedFinding:
    """A finding the law expects from the scenario."""

    rule: str
    severity: str | None
    min_count: int = 1


@dataclass(frozen=True)
class Expect:
    """What ``frota check`` must (and must not) say about the scenario's records."""

    findings: tuple[ExpectedFinding, ...] = ()
    absent: tuple[str, ...] = ()
    only: bool = False


@dataclass(frozen=True)
class Scenario:
    """A whole trip: the vehicle, the line, the itinerary, the people and what the law expects."""

    path: Path
    name: str
    description: str
    seed: int
    start_ms: int
    vehicle: str
    odometer_m: int
    doors: int
    line_id: str
    points: tuple[Point, ...]
    drivers: tuple[Driver, ...]
    stops: tuple[Stop, ...]
    dynamics: Dynamics
    device_events: tuple[DeviceEvent, ...]
    expect: Expect
    registry_path: Path
    registry: Mapping[str, Any] = field(repr=False)

    def card(self, driver_id: str) -> str:
        """The card number of a driver id."""
        for driver in self.drivers:
            if driver.id == driver_id:
                return driver.card
        raise KeyError(driver_id)

    @property
    def line(self) -> Mapping[str, Any]:
        """The scenario's line as the registry describes it."""
        for line in self.registry["lines"]:
            if line["id"] == self.line_id:
                result: Mapping[str, Any] = line
                return result
        raise KeyError(self.line_id)


def door_busy_s(flow: DoorFlow, dyn: Dynamics) -> int:
    """Seconds a door stays open for its passengers (open to close)."""
    if flow.boarded == 0 and flow.alighted == 0:
        return 0
    return round((flow.boarded + flow.alighted) * dyn.passenger_s) + dyn.door_close_after_s


def doors_open_s(stop: Stop, dyn: Dynamics) -> int:
    """Seconds after arriving at a stop at which its doors open."""
    return dyn.door_open_after_s if stop.doors_after_s is None else stop.doors_after_s
