"""The rules engine: canonical records + fleet registry + profiles → findings.

Pure and deterministic: no clock, no I/O. Records come in batches in any order; they are evaluated
in (``ts``, ``vehicle``, ``seq``, ``agent``, arrival) order. A batch is held until a later
timestamp arrives (records of the same millisecond may come in any order), then processed. A
record older than what was already processed makes the engine, when it keeps its records
(``retain=True``), rebuild every state from the start — simple and always right; the collector
can bound the cost by feeding the engine per vehicle group or per day. Without ``retain`` (a
stream already in time order, ``frota check`` on a big file), a late record raises
:class:`LateRecordError` and the caller falls back to sorting everything.

Findings: those closed so far, kept by ``id`` (a re-evaluated episode keeps its id), plus those
still open at ``as_of``, computed on copies of the states when asked.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from collector.registry import Registry
from collector.rules.context import PRIORITY, Trip, Vehicle, slot_activity
from collector.rules.finding import Finding, sort_key
from collector.rules.operations import Operations
from collector.rules.pipeline import DRIVER_RULES, TRIP_RULES, VEHICLE_RULES
from collector.rules.profile import Profile
from collector.rules.timeutil import fast_ts_ms
from protocols.records import Record

#: a queued record: (ms, vehicle, seq, agent, arrival number, record)
Item = tuple[int, str, int, str, int, Record]

_SPEED_RULE = VEHICLE_RULES[0]
_CHANGE_RULES = VEHICLE_RULES[1:]


class LateRecordError(Exception):
    """A record older than what the engine already processed, and no records kept to redo it."""


class DriverState:
    """One driver across vehicles: where they are, their effective activity since when."""

    __slots__ = ("act", "id", "presence", "since", "states", "vehicle")

    def __init__(self, driver_id: str) -> None:
        self.id = driver_id
        self.presence: dict[str, str] = {}
        self.act: str | None = None
        self.since = 0
        self.vehicle: Vehicle | None = None
        self.states = DRIVER_RULES.new_state()


class Engine:
    """Keeps state per vehicle, per trip and per driver; give it records, ask it for findings."""

    def __init__(self, registry: Registry, profiles: dict[str, Profile],
                 default_profile: str = "SP", *, retain: bool = True) -> None:
        self.registry = registry
        self.profiles = profiles
        self.default = profiles[default_profile]
        self.retain = retain
        self._pending: list[Item] = []
        self._history: list[Item] = []
        self._arrivals = 0
        self._done_ms: int | None = None
        self.latest_ms: int | None = None
        self._reset()

    def _reset(self) -> None:
        self.vehicles: dict[str, Vehicle] = {}
        self.drivers: dict[str, DriverState] = {}
        self.trips: dict[str, Trip] = {}
        self.closed: dict[str, Finding] = {}
        self._done_ms = None
        #: rules part 2 (trips, stops, passengers, deadlines, equipment): collector/rules/operations
        self.ops = Operations(self)

    # ---- input ---------------------------------------------------------------------------
    def add(self, records: Iterable[Record]) -> None:
        """Queue records (validated canonical records, any order)."""
        for rec in records:
            self.add_one(fast_ts_ms(rec["ts"]), rec)

    def add_one(self, ms: int, rec: Record) -> None:
        """Queue one record whose ``ts`` is already parsed to ms."""
        self._arrivals += 1
        self._pending.append(
            (ms, rec["vehicle"], rec.get("seq") or 0, rec.get("agent") or "", self._arrivals, rec)
        )
        if self.latest_ms is None or ms > self.latest_ms:
            self.latest_ms = ms

    def flush(self, final: bool = False) -> None:
        """Process queued records; unless ``final``, hold those of the latest millisecond."""
        pending = self._pending
        if not pending:
            return
        pending.sort()
        if final:
            ready, self._pending = pending, []
        else:
            last = pending[-1][0]
            cut = len(pending)
            while cut and pending[cut - 1][0] == last:
                cut -= 1
            ready, self._pending = pending[:cut], pending[cut:]
        if not ready:
            return
        if self._done_ms is not None and ready[0][0] <= self._done_ms:
            if not self.retain:
                raise LateRecordError(f"a record at {ready[0][5].get('ts')} arrived after later ones")
            everything = list(heapq.merge(self._history, ready))
            self._reset()
            self._history = []
            ready = everything
        process = self._process
        for item in ready:
            process(item[0], item[5])
        self._done_ms = ready[-1][0]
        if self.retain:
            self._history.extend(ready)

    # ---- evaluation ----------------------------------------------------------------------
    def _vehicle(self, vehicle_id: str) -> Vehicle:
        v = Vehicle(vehicle_id, self.default)
        for rule in VEHICLE_RULES:
            v.states[rule.id] = rule.new_state()
        self.vehicles[vehicle_id] = v
        return v

    def _found(self, finding: Finding | list[Finding] | None) -> None:
        if isinstance(finding, list):
            for one in finding:
                self.closed[one["id"]] = one
        elif finding is not None:
            self.closed[finding["id"]] = finding

    def _process(self, ms: int, rec: Record) -> None:
        v = self.vehicles.get(rec["vehicle"])
        if v is None:
            v = self._vehicle(rec["vehicle"])
            self.ops.seen(v, ms)
        v.last_ms = ms
        kind = rec["kind"]
        if kind == "speed":
            v.speed_ms = ms
            self._sample(v, ms, float(rec["kmh"]))
        elif kind == "position":
            v.lat = rec["lat"]
            v.lon = rec["lon"]
            if v.zones:
                v.update_limit()
            gps = rec.get("kmh")
            if gps is not None:
                v.gps_kmh = gps
                v.gps_ms = ms
                if ms - v.speed_ms > v.silent_ms:
                    self._sample(v, ms, float(gps))
                self._found(self.ops.position(v, ms, float(gps)))
        elif kind == "driver":
            self._driver_record(v, ms, rec)
        elif kind == "trip":
            self.ops.record(v, ms, rec)
            self._trip_record(v, ms, rec)
        else:
            self._found(self.ops.record(v, ms, rec))

    def _sample(self, v: Vehicle, ms: int, kmh: float) -> None:
        v.kmh = kmh
        moving = kmh >= v.stop_kmh
        if moving != v.moving:
            v.moving = moving
            v.moving_since = ms
            self._changed(v, ms)
        found = _SPEED_RULE.on_sample(v.states[_SPEED_RULE.id], v, ms, kmh, v.silent_ms)
        if found is not None:
            self.closed[found["id"]] = found
        hot = self.ops.hot
        if hot and v.id in hot:
            self._found(self.ops.sample(v, ms, kmh))

    def _changed(self, v: Vehicle, ms: int) -> None:
        """Moving, a slot or the trip changed: tell the change rules and the driver journeys."""
        for rule in _CHANGE_RULES:
            self._found(rule.on_change(v.states[rule.id], v, ms))
        trip = v.trip
        if trip is not None:
            for rule in TRIP_RULES:
                self._found(rule.on_change(trip.states[rule.id], trip, v, ms))
        self._emit_drivers(v, ms)
        self._found(self.ops.changed(v, ms))

    def _driver_record(self, v: Vehicle, ms: int, rec: Record) -> None:
        slot = rec["slot"]
        raw = rec.get("driver")
        v.slot_driver[slot] = self.registry.driver_id(raw) if raw else None
        v.slot_activity[slot] = rec["activity"]
        self._changed(v, ms)

    def _trip_record(self, v: Vehicle, ms: int, rec: Record) -> None:
        trip_id = rec["trip"]
        if rec["event"] == "start":
            trip = self.trips.get(trip_id)
            if trip is not None and trip.vehicle != v.id:
                old = self.vehicles.get(trip.vehicle)
                if old is not None and old.trip is trip:
                    for rule in TRIP_RULES:
                        rule.on_leave(trip.states[rule.id], trip, ms)
                    old.set_trip(None)
                    self._changed(old, ms)
                trip.vehicle = v.id
            if v.trip is not None and v.trip is not trip:
                self._end_trip(v, v.trip, ms)
            if trip is None:
                line = self.registry.lines.get(rec["line"])
                profile = self.profiles[line.profile] if line is not None else self.default
                trip = Trip(trip_id, rec["line"], line, profile, ms, v.id)
                for rule in TRIP_RULES:
                    trip.states[rule.id] = rule.new_state()
                self.trips[trip_id] = trip
            v.set_trip(trip)
            self._changed(v, ms)
        elif v.trip is not None and v.trip.id == trip_id:
            self._end_trip(v, v.trip, ms)
            self._changed(v, ms)

    def _end_trip(self, v: Vehicle, trip: Trip, ms: int) -> None:
        for rule in TRIP_RULES:
            self._found(rule.on_end(trip.states[rule.id], trip, ms))
        self.trips.pop(trip.id, None)
        v.set_trip(None)

    def _emit_drivers(self, v: Vehicle, ms: int) -> None:
        co_driver_available = v.profile.period_at(ms).co_driver_available
        now: dict[str, str] = {}
        for slot in (1, 2):
            driver = v.slot_driver[slot]
            if driver is None:
                continue
            act = slot_activity(slot, v.slot_activity[slot], v.moving, co_driver_available)
            if driver not in now or PRIORITY[act] > PRIORITY[now[driver]]:
                now[driver] = act
        before = v.emitted
        for driver in before:
            if driver not in now:
                self._presence(driver, v, ms, None)
        for driver, act in now.items():
            if before.get(driver) != act:
                self._presence(driver, v, ms, act)
        v.emitted = now

    def _presence(self, driver_id: str, v: Vehicle, ms: int, act: str | None) -> None:
        d = self.drivers.get(driver_id)
        if d is None:
            d = self.drivers[driver_id] = DriverState(driver_id)
        if act is None:
            d.presence.pop(v.id, None)
        else:
            d.presence[v.id] = act
            d.vehicle = v
        effective = max(d.presence.values(), key=PRIORITY.__getitem__) if d.presence else "rest"
        if d.act is None:
            d.act, d.since = effective, ms
        elif effective != d.act:
            if ms > d.since and d.vehicle is not None:
                for found in DRIVER_RULES.on_segment(d.states, d.id, d.since, ms, d.act,
                                                     d.vehicle.context()):
                    self.closed[found["id"]] = found
            d.act, d.since = effective, ms

    # ---- output --------------------------------------------------------------------------
    def findings(self, as_of_ms: int | None = None) -> list[Finding]:
        """Every finding so far, open episodes judged at ``as_of`` (default: the latest record)."""
        self.flush(final=True)
        as_of = as_of_ms if as_of_ms is not None else (self.latest_ms or 0)
        result: dict[str, Finding] = dict(self.closed)
        extra: list[Finding | None] = []
        for v in self.vehicles.values():
            for rule in VEHICLE_RULES:
                extra.append(rule.open(v.states[rule.id], v, as_of))
        for trip in self.trips.values():
            for rule in TRIP_RULES:
                extra.append(rule.open(trip.states[rule.id], trip, as_of))
        for d in self.drivers.values():
            if d.act is None or d.vehicle is None:
                continue
            extra.extend(DRIVER_RULES.open(d.states, d.id, d.since, as_of, d.act,
                                           d.vehicle.context()))
        extra.extend(self.ops.open(as_of))
        for found in extra:
            if found is not None:
                result[found["id"]] = found
        return sorted(result.values(), key=sort_key)


def evaluate(registry: Registry, profiles: dict[str, Profile], records: Iterable[Record],
             default_profile: str = "SP", as_of_ms: int | None = None) -> list[Finding]:
    """One-shot evaluation of a set of records (any order)."""
    engine = Engine(registry, profiles, default_profile)
    engine.add(records)
    return engine.findings(as_of_ms)

