"""A scenario straight to canonical records, without devices or ptys (for the rules and ``frota check``).

Each second gives a ``speed`` record (the registrador: km/h to 0.01, odometer in whole metres,
ignition) and a ``position`` record (the GPS: lat/lon to 1e-6°, km/h to 0.1, course while
moving); the timeline's events give ``driver``, ``trip``, ``incident``, ``door`` and ``device``
records at their seconds, after that second's samples. The ``driver`` field carries the card
number, as the registrador reports it (the registry maps cards to drivers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from protocols.records import Record, ms_to_ts
from simulators.scenario.load import load
from simulators.scenario.model import Scenario
from simulators.scenario.timeline import Event, Timeline, build

#: Below this speed (m/s) the GPS reports no course.
COURSE_MIN_MS = 0.5


def iter_records(tl: Timeline) -> Iterator[Record]:
    """The scenario's records in time order."""
    sc = tl.scenario
    vehicle = sc.vehicle
    events = tl.events
    k = 0
    route = tl.route
    base_ms = sc.start_ms
    odometer0 = sc.odometer_m
    stamps = second_stamps(base_ms)
    last_s, place = -1.0, (0.0, 0.0, 0.0)
    for t, (v, s) in enumerate(zip(tl.speed_ms, tl.route_m, strict=True)):
        ts = next(stamps)
        kmh = v * 3.6
        yield {"vehicle": vehicle, "ts": ts, "kind": "speed", "kmh": round(kmh, 2),
               "odometer_m": odometer0 + int(s), "ignition": True}
        if s != last_s:  # standing still: the same place as the second before
            last_s, place = s, route.locate(s)
        lat, lon, course = place
        pos: Record = {"vehicle": vehicle, "ts": ts, "kind": "position",
                       "lat": round(lat, 6), "lon": round(lon, 6), "kmh": round(kmh, 1)}
        if v >= COURSE_MIN_MS:
            pos["course"] = round(course, 1)
        yield pos
        while k < len(events) and events[k].t_s == t:
            yield event_record(tl, events[k], ts)
            k += 1


def second_stamps(start_ms: int) -> Iterator[str]:
    """``ms_to_ts`` of ``start_ms``, ``start_ms + 1000``, …"""
    ms = start_ms
    while True:
        yield ms_to_ts(ms)
        ms += 1000


def event_record(tl: Timeline, event: Event, ts: str | None = None) -> Record:
    """The canonical record of one timeline event."""
    rec: Record = {"vehicle": tl.scenario.vehicle, "ts": ts or ms_to_ts(tl.ms(event.t_s)),
                   "kind": event.kind}
    for key, value in event.fields.items():
        if key == "scheduled":
            rec[key] = ms_to_ts(value)
        elif value is not None or key == "driver":
            rec[key] = value
    return rec


def render(scenario: Scenario | str | Path) -> list[Record]:
    """All the records of a scenario (a loaded one or a file path)."""
    sc = scenario if isinstance(scenario, Scenario) else load(scenario)
    return list(iter_records(build(sc)))
