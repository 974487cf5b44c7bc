"""Checks of a loaded scenario as a whole: its registry, its ids on the wire, its itinerary."""

from __future__ import annotations

from simulators.scenario.model import Scenario, ScenarioError, door_busy_s, doors_open_s


def check_registry(sc: Scenario) -> None:
    """The registry must describe the scenario's line, vehicle and drivers the same way."""
    where = f"registry {sc.registry_path.name}"
    try:
        line = sc.line
    except KeyError:
        raise ScenarioError(f"{where}: has no line {sc.line_id!r}") from None
    listed = {p.get("name"): p for p in line.get("points", [])}
    for point in sc.points:
        entry = listed.get(point.name)
        same = entry is not None and (
            entry.get("kind") == point.kind
            and abs(float(entry.get("lat", 999)) - point.lat) < 1e-6
            and abs(float(entry.get("lon", 999)) - point.lon) < 1e-6
            and abs(float(entry.get("radius_m", 150)) - point.radius_m) < 1e-6
        )
        if not same:
            raise ScenarioError(f"{where}: line {sc.line_id} point {point.name!r} differs "
                                "from the scenario's [[line.point]] (or is missing)")
    if len(listed) != len(sc.points):
        raise ScenarioError(f"{where}: line {sc.line_id} has points the scenario does not list")
    if not any(v.get("id") == sc.vehicle for v in sc.registry["vehicles"]):
        raise ScenarioError(f"{where}: has no vehicle {sc.vehicle!r}")
    cards = {d.get("id"): d.get("card") for d in sc.registry["drivers"]}
    for driver in sc.drivers:
        if cards.get(driver.id) != driver.card:
            raise ScenarioError(f"{where}: driver {driver.id} is missing or has another card")


#: The registrador's fixed-width ASCII fields (firmware-notes/registrador.md): card, trip, line.
WIRE_FIELD_SIZE = 16


def check_wire_sizes(sc: Scenario) -> None:
    """Ids the registrador carries must fit its 16-byte ASCII fields, or the player cannot send them."""
    names = [("line id", sc.line_id)] + [("card", d.card) for d in sc.drivers] + [
        ("trip", s.trip_start.trip) for s in sc.stops if s.trip_start is not None]
    for what, value in names:
        if not value.isascii() or not 0 < len(value) <= WIRE_FIELD_SIZE:
            raise ScenarioError(f"{what} {value!r} must be 1-{WIRE_FIELD_SIZE} ASCII characters "
                                "(the registrador's field)")


def check_itinerary(sc: Scenario) -> None:
    """Times at each stop must fit in its dwell; passengers on board never go negative."""
    dyn = sc.dynamics
    on_board = 0
    open_trips: set[str] = set()
    for stop in sc.stops:

        def fail(message: str, label: str = stop.label) -> ScenarioError:
            return ScenarioError(f"{label}: {message}")

        last = stop is sc.stops[-1]
        busy = 0
        for flow in stop.doors:
            busy = max(busy, door_busy_s(flow, dyn))
        departure_margin = 0 if last else 10
        if busy and doors_open_s(stop, dyn) + busy + departure_margin > stop.dwell_s:
            raise fail(f"dwell_min too short for the passengers (needs "
                         f"{(doors_open_s(stop, dyn) + busy + departure_margin) / 60:.1f} min)")
        if stop.trip_start is not None and (last or stop.dwell_s < 180):
            raise fail("a trip_start needs a stop of at least 3 min that the vehicle leaves")
        if stop.dwell_s < 60:
            raise fail("dwell_min should be at least 1 (the console and cards need time)")
        if stop.incident is not None and stop.incident.after_s >= stop.dwell_s:
            raise fail("incident after_min falls after the vehicle leaves")
        on_board -= sum(f.alighted for f in stop.doors)
        if on_board < 0:
            raise fail(f"{-on_board} more passengers alight than are on board")
        on_board += sum(f.boarded for f in stop.doors)
        if stop.trip_end is not None:
            if stop.trip_end not in open_trips:
                raise fail(f"trip_end {stop.trip_end!r} was not started")
            open_trips.discard(stop.trip_end)
        if stop.trip_start is not None:
            open_trips.add(stop.trip_start.trip)
