"""A scenario worked out second by second: speed, distance along the route, and timed events.

The renderer turns a :class:`Timeline` into canonical records; the player feeds the same
timeline to the simulated devices, so both tell one story. Everything is on whole seconds of
device time from the scenario's start; the only randomness (the speed's wander around the
cruise speed) comes from ``random.Random(seed)``.

Kinematics per leg: the bus leaves a stop at 0 km/h, accelerates at ``accel_ms2`` towards the
leg's cruise speed (plus a seeded wander of at most ``jitter_kmh``), slows in time for a lower
cruise speed ahead or for the next stop (braking curve ``v = sqrt(v_next² + 2·decel·d)``), and
stops exactly on the next stop's position. Distance is the trapezoidal integral of speed, and
the position is that distance along the route's great-circle polyline.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any

from simulators.scenario.geo import Polyline
from simulators.scenario.model import Scenario, ScenarioError, Stop, door_busy_s, doors_open_s

#: Order of events that fall on the same second (a card goes in before the trip starts).
_ORDER = {"device": 0, "driver": 1, "trip": 2, "incident": 3, "door": 4}
#: Seconds after arriving at a stop: declared activity, trip end, card out, card in.
ACTIVITY_AFTER_S = 2
TRIP_END_AFTER_S = 5
CARD_OUT_AFTER_S = 20
CARD_IN_AFTER_S = 40
#: Seconds before leaving a stop at which the trip is started on the console.
TRIP_START_BEFORE_S = 120
MIN_LEG_M = 50.0


class TimelineError(ScenarioError):
    """A scenario whose kinematics cannot be worked out (a leg too short, speeds out of order)."""


@dataclass(frozen=True)
class Event:
    """Something that happens at a second: a record's kind and fields (driver, trip, door…)."""

    t_s: int
    kind: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Passage:
    """One passenger through a door at a second (``boarding`` true = in, false = out)."""

    t_s: int
    door: int
    boarding: bool


@dataclass(frozen=True)
class StopSpan:
    """When the vehicle stands at a stop and where that is along the route."""

    stop: Stop
    arrive_s: int
    depart_s: int | None  # None at the last stop
    route_m: float


@dataclass
class Timeline:
    """Per-second speed (m/s) and route distance (m), the stops, the events and the passages."""

    scenario: Scenario
    route: Polyline
    speed_ms: list[float] = field(default_factory=list)
    route_m: list[float] = field(default_factory=list)
    spans: list[StopSpan] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    rounded_arrivals: int = 0
    """Legs whose last second was snapped onto the stop (distance not the speeds' integral)."""

    @property
    def duration_s(self) -> int:
        """Seconds from the first to the last sample."""
        return len(self.speed_ms) - 1

    def ms(self, t_s: int) -> int:
        """Device time (ms since the epoch) of a second of the scenario."""
        return self.scenario.start_ms + t_s * 1000

    def odometer_m(self, t_s: int) -> int:
        """The registrador's odometer (whole metres) at a second."""
        return self.scenario.odometer_m + int(self.route_m[t_s])


def route_points(sc: Scenario) -> tuple[list[tuple[float, float]], list[int]]:
    """The route's vertices (stops and waypoints in order) and the vertex index of each stop."""
    points: list[tuple[float, float]] = []
    stop_vertex: list[int] = []
    for stop in sc.stops:
        points.extend(stop.via)
        stop_vertex.append(len(points))
        points.append((stop.lat, stop.lon))
    return points, stop_vertex


def build(sc: Scenario) -> Timeline:
    """Work out a scenario second by second."""
    points, stop_vertex = route_points(sc)
    route = Polyline(points)
    tl = Timeline(scenario=sc, route=route, speed_ms=[0.0], route_m=[0.0])
    rng = random.Random(sc.seed)
    # the registrador's first status frame reports both slots (empty until a card goes in)
    tl.events += [Event(0, "driver", {"slot": slot, "driver": None, "activity": "unknown"})
                  for slot in (1, 2)]
    for i, stop in enumerate(sc.stops):
        if i > 0:
            start_m = route.cumulative[stop_vertex[i - 1]]
            length = route.cumulative[stop_vertex[i]] - start_m
            if length < MIN_LEG_M:
                raise TimelineError(f"{stop.label}: the leg to it is only {length:.0f} m long")
            _drive(tl, stop, start_m, length, rng)
        arrive = len(tl.speed_ms) - 1
        last = i == len(sc.stops) - 1
        depart = None if last else arrive + stop.dwell_s
        tl.spans.append(StopSpan(stop, arrive, depart, tl.route_m[-1]))
        _stop_events(tl, stop, arrive, depart, first=i == 0)
        _stand(tl, stop.dwell_s)
    for dev in sc.device_events:
        if dev.at_s > tl.duration_s:
            raise TimelineError(f"device_event at {dev.at_s / 60:.1f} min is after the end "
                                f"({tl.duration_s / 60:.1f} min)")
        tl.events.append(Event(dev.at_s, "device", {
            "device": dev.device, "status": dev.status, "detail": dev.detail}))
    tl.events.sort(key=lambda e: (e.t_s, _ORDER[e.kind]))
    tl.passages.sort(key=lambda p: (p.t_s, p.door, p.boarding))
    return tl


def _stand(tl: Timeline, seconds: int) -> None:
    here = tl.route_m[-1]
    tl.speed_ms.extend([0.0] * seconds)
    tl.route_m.extend([here] * seconds)


def _cruise_at(breaks: list[tuple[float, float]], s_m: float) -> float:
    cruise = breaks[0][1]
    for at, speed in breaks:
        if s_m >= at:
            cruise = speed
    return cruise


def leg_breaks(stop: Stop, length: float) -> list[tuple[float, float]]:
    """The leg's speed changes as (metres from its start, cruise m/s), in route order."""
    breaks = [((km * 1000 if km >= 0 else length + km * 1000), kmh / 3.6)
              for km, kmh in stop.speeds]
    for (a, _), (b, _) in itertools.pairwise(breaks):
        if not 0 <= a < b < length:
            raise TimelineError(f"{stop.label}: speeds change at {b / 1000:.2f} km, out of order "
                                f"or past the leg's {length / 1000:.2f} km")
    return breaks


def _drive(tl: Timeline, stop: Stop, start_m: float, length: float, rng: random.Random) -> None:
    """Append the seconds of one leg, from standstill to standstill at its end."""
    dyn = tl.scenario.dynamics
    accel, decel = dyn.accel_ms2, dyn.decel_ms2
    jitter_ms = dyn.jitter_kmh / 3.6
    breaks = leg_breaks(stop, length)
    ahead = breaks[1:]
    s, v, wander = 0.0, 0.0, 0.0
    limit = int(length / 0.5) + 3600  # a leg never takes longer than at 0.5 m/s plus an hour
    for _ in range(limit):
        d = length - s
        if v > 0 and v / 2 <= d <= v * v / (2 * decel) + v / 2:
            _final_approach(tl, start_m, s, v, d)
            return
        wander = min(max(wander + rng.gauss(0.0, 0.08), -jitter_ms), jitter_ms)
        target = _cruise_at(breaks, s) + wander
        target = min(target, math.sqrt(2 * decel * max(length - s, 0.0)))
        for at, cruise in ahead:
            if at > s:
                target = min(target, math.sqrt(cruise * cruise + 2 * decel * (at - s)))
        v_new = min(v + accel, target) if v < target else max(v - 2 * decel, target)
        v_new = max(v_new, 0.0)
        ds = (v + v_new) / 2
        if s + ds >= length - 0.25 or (v_new < 0.3 and length - s < 1.0):
            tl.rounded_arrivals += 1  # missed the exact approach: snap onto the stop
            tl.speed_ms.append(0.0)
            tl.route_m.append(start_m + length)
            return
        s += ds
        v = v_new
        tl.speed_ms.append(v)
        tl.route_m.append(start_m + s)
    raise TimelineError(f"{stop.label}: the bus never reaches it (speeds too low?)")


def _final_approach(tl: Timeline, start_m: float, s: float, v: float, d: float) -> None:
    """Brake from ``v`` to a standstill exactly ``d`` metres on, in whole seconds.

    ``n`` seconds of near-constant deceleration cover about ``v·n/2``; the speeds in between
    are scaled so that the trapezoids of the reported speeds add up to ``d`` exactly, so the
    distance is the integral of the speed and the registrador's odometer (which sums each
    second's speed) lands on the stop too.
    """
    end_m = start_m + s + d
    n = max(2, round(2 * d / v))
    rest = d - v / 2
    weights = n * (n - 1) / 2
    previous = v
    for k in range(1, n):
        speed = rest * (n - k) / weights
        s += (previous + speed) / 2
        tl.speed_ms.append(speed)
        tl.route_m.append(start_m + s)
        previous = speed
    tl.speed_ms.append(0.0)
    tl.route_m.append(end_m)  # = start_m + s + previous / 2, without the rounding


def _stop_events(tl: Timeline, stop: Stop, arrive: int, depart: int | None, *, first: bool) -> None:
    sc = tl.scenario
    ev = tl.events
    dyn = sc.dynamics
    slots = _slot_state(tl)
    if not first:
        for slot, activity in ((1, stop.activity), (2, stop.co_activity)):
            card, current = slots[slot]
            if card is not None and current != activity:
                ev.append(Event(arrive + ACTIVITY_AFTER_S, "driver",
                                {"slot": slot, "driver": card, "activity": activity}))
    if stop.trip_end is not None:
        ev.append(Event(arrive + TRIP_END_AFTER_S, "trip",
                        {"event": "end", "trip": stop.trip_end, "line": sc.line_id}))
    for slot, new, activity in ((1, stop.driver, stop.activity),
                                (2, stop.co_driver, stop.co_activity)):
        if new is None:
            continue
        card = sc.card(new) if new else None
        if slots[slot][0] is not None and slots[slot][0] != card:
            ev.append(Event(arrive + CARD_OUT_AFTER_S + slot - 1, "driver",
                            {"slot": slot, "driver": None, "activity": "unknown"}))
        if card is not None and slots[slot][0] != card:
            ev.append(Event(arrive + CARD_IN_AFTER_S + slot - 1, "driver",
                            {"slot": slot, "driver": card, "activity": activity}))
    if stop.incident is not None:
        inc = stop.incident
        ev.append(Event(arrive + inc.after_s, "incident",
                        {"cause": inc.cause, "carrier_fault": inc.carrier_fault}))
    for flow in stop.doors:
        busy = door_busy_s(flow, dyn)
        if busy == 0:
            continue
        opened = arrive + doors_open_s(stop, dyn)
        closed = opened + busy
        ev.append(Event(opened, "door", {"door": flow.door, "open": True,
                                         "boarded": 0, "alighted": 0}))
        ev.append(Event(closed, "door", {"door": flow.door, "open": False,
                                         "boarded": flow.boarded, "alighted": flow.alighted}))
        for k in range(flow.alighted + flow.boarded):
            t = opened + min(busy - 1, math.floor((k + 0.5) * dyn.passenger_s))
            tl.passages.append(Passage(t, flow.door, k >= flow.alighted))
    if depart is not None:
        if stop.trip_start is not None:
            ev.append(Event(depart - TRIP_START_BEFORE_S, "trip", {
                "event": "start", "trip": stop.trip_start.trip, "line": sc.line_id,
                "scheduled": stop.trip_start.scheduled_ms}))
        after = _slot_state(tl)
        for slot, activity in ((1, "drive"), (2, dyn.moving_co_activity)):
            card, current = after[slot]
            if card is not None and current != activity:
                ev.append(Event(depart, "driver",
                                {"slot": slot, "driver": card, "activity": activity}))


def _slot_state(tl: Timeline) -> dict[int, tuple[str | None, str]]:
    """(card, declared activity) of each slot after the events so far."""
    state: dict[int, tuple[str | None, str]] = {1: (None, "unknown"), 2: (None, "unknown")}
    for event in sorted((e for e in tl.events if e.kind == "driver"), key=lambda e: e.t_s):
        state[event.fields["slot"]] = (event.fields["driver"], event.fields["activity"])
    return state
