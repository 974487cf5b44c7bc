"""The scenario file (docs/scenarios.md): TOML read with ``tomllib`` into the dataclasses, checked.

Every mistake in a file is a :class:`ScenarioError` whose message names the file, the place
(``stop 3 (Graal Jundiaí)``) and what to fix; nothing half-loaded escapes.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from protocols.records import DEVICE_STATUSES, DEVICES, INCIDENT_CAUSES, ts_to_ms
from simulators.scenario.checks import check_itinerary, check_registry, check_wire_sizes
from simulators.scenario.model import (
    DECLARED,
    POINT_KINDS,
    SEVERITIES,
    DeviceEvent,
    DoorFlow,
    Driver,
    Dynamics,
    Expect,
    ExpectedFinding,
    Incident,
    Point,
    Scenario,
    ScenarioError,
    Stop,
    TripStart,
)


class _Reader:
    """Typed access to a TOML table with messages naming the place."""

    def __init__(self, table: Mapping[str, Any], where: str) -> None:
        self.table = table
        self.where = where

    def fail(self, message: str) -> ScenarioError:
        return ScenarioError(f"{self.where}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., /) -> Any:
        if key not in self.table:
            if default is ...:
                raise self.fail(f"missing {key!r}")
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise self.fail(f"{key} = {value!r} has the wrong type")
        if not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.fail(f"{key} = {value!r} should be a {names}")
        return value

    def number(self, key: str, default: float | None = None, *, lo: float = 0.0) -> float:
        value = float(self.get(key, float) if default is None else self.get(key, float, default))
        if value < lo:
            raise self.fail(f"{key} = {value} should be at least {lo}")
        return value

    def choice(self, key: str, choices: Sequence[str], default: str | None = None) -> str:
        value = str(self.get(key, str) if default is None else self.get(key, str, default))
        if value not in choices:
            raise self.fail(f"{key} = {value!r} should be one of {', '.join(choices)}")
        return value

    def time_ms(self, key: str) -> int:
        value = self.get(key, (str, datetime))
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise self.fail(f"{key} has no UTC offset (write e.g. 2026-03-02T12:00:00Z)")
            value = value.astimezone(UTC).isoformat()
        try:
            return ts_to_ms(value)
        except ValueError as err:
            raise self.fail(f"{key}: {err}") from err

    def unknown(self, allowed: set[str]) -> None:
        extra = sorted(set(self.table) - allowed)
        if extra:
            raise self.fail(f"unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _latlon(value: Any, where: str) -> tuple[float, float]:
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )
    if not ok or not (-90 <= value[0] <= 90 and -180 <= value[1] <= 180):
        raise ScenarioError(f"{where}: {value!r} is not a [lat, lon] pair in degrees")
    return float(value[0]), float(value[1])


def _point(table: Any, where: str) -> Point:
    if not isinstance(table, dict):
        raise ScenarioError(f"{where}: should be a table")
    r = _Reader(table, where)
    r.unknown({"name", "kind", "lat", "lon", "radius_m"})
    lat, lon = _latlon([r.get("lat", float), r.get("lon", float)], where)
    return Point(
        name=r.get("name", str),
        kind=r.choice("kind", POINT_KINDS),
        lat=lat,
        lon=lon,
        radius_m=r.number("radius_m", 150.0, lo=1.0),
    )


def _speeds(r: _Reader) -> tuple[tuple[float, float], ...]:
    if "speeds" in r.table:
        if "cruise_kmh" in r.table:
            raise r.fail("give cruise_kmh or speeds, not both")
        raw = r.get("speeds", list)
        pairs = [_latlon_free(item, r) for item in raw]
        if not pairs or pairs[0][0] != 0:
            raise r.fail("speeds must start with [0, KMH] (km into the leg, cruise km/h)")
        for (a, _), (b, _) in itertools.pairwise(pairs):
            # km >= 0 count from the leg's start, km < 0 back from its end (the next stop)
            if (a >= 0 and 0 <= b <= a) or (a < 0 and (b >= 0 or b <= a)):
                raise r.fail("speeds must be in route order: km from the start increasing, "
                             "then negative km (before the stop) increasing towards 0")
        return tuple(pairs)
    return ((0.0, r.number("cruise_kmh", lo=5.0)),)


def _latlon_free(item: Any, r: _Reader) -> tuple[float, float]:
    ok = (
        isinstance(item, list)
        and len(item) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in item)
    )
    if not ok or not 5 <= item[1] <= 200:
        raise r.fail(f"speeds entry {item!r} should be [km, km/h in 5..200]")
    return float(item[0]), float(item[1])


def _stop(
    table: Any, index: int, points: dict[str, Point], drivers: dict[str, Driver], doors: int
) -> Stop:
    where = f"stop {index + 1}"
    if not isinstance(table, dict):
        raise ScenarioError(f"{where}: should be a table ([[stop]])")
    r = _Reader(table, where)
    r.unknown({
        "point", "name", "lat", "lon", "via", "cruise_kmh", "speeds", "dwell_min", "activity",
        "co_activity", "driver", "co_driver", "trip_start", "trip_end", "doors", "doors_at_min",
        "incident",
    })
    point: Point | None = None
    if "point" in table:
        name = r.get("point", str)
        if name not in points:
            raise r.fail(f"point {name!r} is not a point of the line")
        point = points[name]
        if "lat" in table or "lon" in table:
            raise r.fail("a stop at a point takes its position from the point; drop lat/lon")
        lat, lon = point.lat, point.lon
    else:
        name = r.get("name", str, f"roadside stop {index + 1}")
        lat, lon = _latlon([r.get("lat", float), r.get("lon", float)], where)
    r = _Reader(table, f"{where} ({name})")
    via = tuple(_latlon(v, f"{r.where} via") for v in r.get("via", list, []))
    if index == 0:
        if via or "cruise_kmh" in table or "speeds" in table:
            raise r.fail("the first stop is where the vehicle starts: no via, cruise_kmh, speeds")
        speeds: tuple[tuple[float, float], ...] = ()
    else:
        speeds = _speeds(r)
    dwell_s = round(r.number("dwell_min") * 60)
    activity = r.choice("activity", DECLARED, "work")
    co_activity = r.choice("co_activity", DECLARED, "available")

    def driver_id(key: str) -> str | None:
        if key not in table:
            return None
        value = str(r.get(key, str))
        if value and value not in drivers:
            raise r.fail(f"{key} = {value!r} is not a [[driver]] id")
        return value

    trip_start = None
    if "trip_start" in table:
        t = _Reader(r.get("trip_start", dict), f"{r.where} trip_start")
        t.unknown({"trip", "scheduled"})
        trip_start = TripStart(trip=t.get("trip", str), scheduled_ms=t.time_ms("scheduled"))
    flows = []
    for item in r.get("doors", list, []):
        d = _Reader(item if isinstance(item, dict) else {}, f"{r.where} doors")
        d.unknown({"door", "boarded", "alighted"})
        door = int(d.get("door", int))
        if not 1 <= door <= doors:
            raise d.fail(f"door {door} is not one of 1..{doors} (see vehicle doors)")
        flows.append(DoorFlow(door, int(d.get("boarded", int, 0)), int(d.get("alighted", int, 0))))
        if flows[-1].boarded < 0 or flows[-1].alighted < 0:
            raise d.fail("boarded and alighted are counts >= 0")
    if len({f.door for f in flows}) != len(flows):
        raise r.fail("each door appears once per stop")
    incident = None
    if "incident" in table:
        t = _Reader(r.get("incident", dict), f"{r.where} incident")
        t.unknown({"cause", "carrier_fault", "after_min"})
        incident = Incident(
            cause=t.choice("cause", INCIDENT_CAUSES),
            carrier_fault=t.get("carrier_fault", bool, None),
            after_s=round(t.number("after_min", 1.0) * 60),
        )
    return Stop(
        index=index, name=name, lat=lat, lon=lon, point=point, via=via, speeds=speeds,
        dwell_s=dwell_s, activity=activity,
        doors_after_s=round(r.number("doors_at_min") * 60) if "doors_at_min" in table else None,
        co_activity=co_activity,
        driver=driver_id("driver"), co_driver=driver_id("co_driver"), trip_start=trip_start,
        trip_end=r.get("trip_end", str, None), doors=tuple(flows), incident=incident,
    )


def _expect(table: Any) -> Expect:
    r = _Reader(table if isinstance(table, dict) else {}, "[expect]")
    r.unknown({"finding", "absent", "only"})
    findings = []
    for item in r.get("finding", list, []):
        f = _Reader(item if isinstance(item, dict) else {}, "[[expect.finding]]")
        f.unknown({"rule", "severity", "min_count"})
        severity = f.choice("severity", SEVERITIES) if "severity" in f.table else None
        findings.append(
            ExpectedFinding(f.get("rule", str), severity, int(f.get("min_count", int, 1)))
        )
    absent = r.get("absent", list, [])
    if not all(isinstance(a, str) for a in absent):
        raise r.fail("absent is a list of rule ids")
    return Expect(tuple(findings), tuple(absent), bool(r.get("only", bool, False)))


def load(path: str | Path) -> Scenario:
    """Read and check a scenario file and its registry; ScenarioError says what is wrong."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err.strerror or err}") from err
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ScenarioError(f"{path}: not valid TOML: {err}") from err
    try:
        return _build(path, data)
    except ScenarioError as err:
        raise ScenarioError(f"{path.name}: {err}") from err


def _build(path: Path, data: dict[str, Any]) -> Scenario:
    top = _Reader(data, "file")
    top.unknown({"scenario", "dynamics", "line", "driver", "stop", "device_event", "expect"})
    s = _Reader(top.get("scenario", dict), "[scenario]")
    s.unknown({"name", "description", "seed", "start", "vehicle", "odometer_km", "doors",
               "registry"})
    doors = int(s.get("doors", int, 2))
    if not 1 <= doors <= 8:
        raise s.fail("doors should be 1..8")
    d = _Reader(top.get("dynamics", dict, {}), "[dynamics]")
    d.unknown({"accel_ms2", "decel_ms2", "jitter_kmh", "door_open_after_s", "passenger_s",
               "door_close_after_s", "moving_co_activity"})
    dynamics = Dynamics(
        accel_ms2=d.number("accel_ms2", 0.6, lo=0.05),
        decel_ms2=d.number("decel_ms2", 0.8, lo=0.05),
        jitter_kmh=d.number("jitter_kmh", 1.5),
        door_open_after_s=round(d.number("door_open_after_s", 10, lo=1)),
        passenger_s=d.number("passenger_s", 3.0, lo=0.5),
        door_close_after_s=round(d.number("door_close_after_s", 5, lo=1)),
        moving_co_activity=d.choice("moving_co_activity", DECLARED, "available"),
    )
    line = _Reader(top.get("line", dict), "[line]")
    line.unknown({"id", "point"})
    points = tuple(
        _point(p, f"[[line.point]] {i + 1}") for i, p in enumerate(line.get("point", list))
    )
    by_name = {p.name: p for p in points}
    if len(by_name) != len(points):
        raise line.fail("point names must be unique")
    drivers = []
    for i, item in enumerate(top.get("driver", list, [])):
        r = _Reader(item if isinstance(item, dict) else {}, f"[[driver]] {i + 1}")
        r.unknown({"id", "card"})
        drivers.append(Driver(r.get("id", str), r.get("card", str)))
    by_id = {dr.id: dr for dr in drivers}
    raw_stops = top.get("stop", list)
    if len(raw_stops) < 2:
        raise top.fail("an itinerary needs at least two [[stop]] tables")
    stops = tuple(_stop(t, i, by_name, by_id, doors) for i, t in enumerate(raw_stops))
    events = []
    for i, item in enumerate(top.get("device_event", list, [])):
        r = _Reader(item if isinstance(item, dict) else {}, f"[[device_event]] {i + 1}")
        r.unknown({"at_min", "device", "status", "detail"})
        events.append(DeviceEvent(
            at_s=round(r.number("at_min") * 60),
            device=r.choice("device", DEVICES),
            status=r.choice("status", DEVICE_STATUSES),
            detail=r.get("detail", str, None),
        ))
    registry_path = path.parent / s.get("registry", str)
    registry = _load_registry(registry_path)
    scenario = Scenario(
        path=path,
        name=s.get("name", str, path.stem),
        description=s.get("description", str, ""),
        seed=int(s.get("seed", int, 1)),
        start_ms=s.time_ms("start"),
        vehicle=s.get("vehicle", str),
        odometer_m=round(s.number("odometer_km", 0.0) * 1000),
        doors=doors,
        line_id=line.get("id", str),
        points=points,
        drivers=tuple(drivers),
        stops=stops,
        dynamics=dynamics,
        device_events=tuple(events),
        expect=_expect(top.get("expect", dict, {})),
        registry_path=registry_path,
        registry=registry,
    )
    check_wire_sizes(scenario)
    check_registry(scenario)
    check_itinerary(scenario)
    return scenario


def _load_registry(path: Path) -> dict[str, Any]:
    try:
        registry = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioError(f"registry {path.name}: cannot read: {err.strerror or err}") from err
    except ValueError as err:
        raise ScenarioError(f"registry {path.name}: not valid JSON: {err}") from err
    if not isinstance(registry, dict) or not all(
        isinstance(registry.get(k), list) for k in ("lines", "vehicles", "drivers")
    ):
        raise ScenarioError(f"registry {path.name}: needs lists 'lines', 'vehicles', 'drivers'")
    return registry
