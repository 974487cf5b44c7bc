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

The engine derives what every rule reads (moving, slots, trips, each driver's effective activity
across vehicles) and calls the rules of the pipeline (``collector/rules/pipeline.py``) through
the hooks of ``collector/rules/rule.py``; each rule gets a read-only :class:`RuleContext`, never
the engine. Whether a rule applies under a finding's profile is decided here, once (``_keep``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from types import MappingProxyType

from collector.registry import Registry
from collector.rules.context import (
    PRIORITY,
    DriverState,
    Trip,
    Vehicle,
    Whereabouts,
    same_place,
    slot_activity,
)
from collector.rules.finding import Finding, sort_key
from collector.rules.pipeline import RULES, Pipeline, RuleType
from collector.rules.profile import Profile
from collector.rules.rule import Found, RuleContext
from protocols.records import Record, ts_to_ms

#: a queued record: (ms, vehicle, seq, agent, arrival number, record)
Item = tuple[int, str, int, str, int, Record]
#: The agent of operator entries (collector/entries.py), the only ones a withdrawal withdraws.
OPERATOR = "operator"


class LateRecordError(Exception):
    """A record older than what the engine already processed, and no records kept to redo it."""


class Engine:
    """Keeps state per vehicle, per trip and per driver; give it records, ask it for findings."""

    def __init__(self, registry: Registry, profiles: dict[str, Profile],
                 default_profile: str = "SP", *, retain: bool = True,
                 rules: Iterable[RuleType] = RULES) -> None:
        self.registry = registry
        self.profiles = profiles
        self.default = profiles[default_profile]
        self.retain = retain
        self.rule_types = tuple(rules)
        #: (profile, rule) pairs whose findings are dropped: the rule does not apply there
        self._off = {(p.name, rule_id) for p in profiles.values()
                     for rule_id, cfg in p.rules.items() if not cfg.applies}
        self._pending: list[Item] = []
        #: withdrawal records queued in _pending (their entries are dropped at the flush)
        self._withdrawals = 0
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
        self.context = RuleContext(self.registry, MappingProxyType(self.profiles), self.default,
                                   MappingProxyType(self.vehicles), MappingProxyType(self.trips),
                                   MappingProxyType(self.drivers))
        self.pipeline = Pipeline(self.rule_types, self.context)
        self._bind()

    def _bind(self) -> None:
        """Take the hooks of ``self.pipeline`` (again, after a restored pipeline replaced it)."""
        hooks = self.pipeline.hooks
        self._on_vehicle = hooks["on_vehicle"]
        self._on_record = hooks["on_record"]
        self._on_position = hooks["on_position"]
        self._on_change = hooks["on_change"]
        self._on_trip_start = hooks["on_trip_start"]
        self._on_trip_leave = hooks["on_trip_leave"]
        self._on_trip_end = hooks["on_trip_end"]
        self._on_segment = hooks["on_segment"]
        self._open = hooks["open"]
        self._every_sample = self.pipeline.every_sample
        self._hot_sample = self.pipeline.hot_sample

    # ---- input ---------------------------------------------------------------------------
    def add(self, records: Iterable[Record]) -> None:
        """Queue records (validated canonical records, any order)."""
        for rec in records:
            self.add_one(ts_to_ms(rec["ts"]), rec)

    def add_one(self, ms: int, rec: Record) -> None:
        """Queue one record whose ``ts`` is already parsed to ms."""
        self._arrivals += 1
        if rec["kind"] == "withdrawal":
            self._withdrawals += 1
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
        done = ready[-1][0]
        if self._withdrawals:
            ready = self._without_withdrawn(ready)
        process = self._process
        for item in ready:
            process(item[0], item[5])
        self._done_ms = done
        if self.retain:
            self._history.extend(ready)

    def _without_withdrawn(self, ready: list[Item]) -> list[Item]:
        """``ready`` without the operator entries withdrawn by a withdrawal among them, nor the
        withdrawals (docs/records.md: a withdrawal carries its entry's ``ts``, so both are
        flushed together; the rules judge as if the entry had never been made)."""
        gone = {(item[1], item[5]["withdraws"]) for item in ready
                if item[5]["kind"] == "withdrawal" and item[3] == OPERATOR}
        self._withdrawals = sum(1 for item in self._pending if item[5]["kind"] == "withdrawal")
        return [item for item in ready if item[5]["kind"] != "withdrawal"
                and not (item[3] == OPERATOR and (item[1], item[2]) in gone)]

    # ---- evaluation ----------------------------------------------------------------------
    def _vehicle(self, vehicle_id: str, ms: int) -> Vehicle:
        known = self.registry.vehicles.get(vehicle_id)
        home = self.profiles.get(known.profile) if known is not None and known.profile else None
        v = self.vehicles[vehicle_id] = Vehicle(vehicle_id, home or self.default)
        for hook in self._on_vehicle:
            hook(v, ms)
        return v

    def _keep(self, finding: Finding) -> None:
        """A finding goes in unless its rule does not apply under its profile."""
        if (finding["profile"], finding["rule"]) not in self._off:
            self.closed[finding["id"]] = finding

    def _found(self, found: Found) -> None:
        if isinstance(found, list):
            for one in found:
                self._keep(one)
        elif found is not None:
            self._keep(found)

    def _process(self, ms: int, rec: Record) -> None:
        v = self.vehicles.get(rec["vehicle"])
        if v is None:
            v = self._vehicle(rec["vehicle"], ms)
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
            for hook in self._on_position:
                self._found(hook(v, ms, None if gps is None else float(gps)))
        elif kind == "driver":
            self._driver_record(v, ms, rec)
        else:
            for hook in self._on_record:
                self._found(hook(v, ms, rec))
            if kind == "trip":
                self._trip_record(v, ms, rec)

    def _sample(self, v: Vehicle, ms: int, kmh: float) -> None:
        v.kmh = kmh
        moving = kmh >= v.stop_kmh
        if moving != v.moving:
            v.moving = moving
            v.moving_since = ms
            self._changed(v, ms)
        for hook in self._every_sample:
            found = hook(v, ms, kmh)
            if found is not None:
                self._found(found)
        for hot, hook in self._hot_sample:
            if hot and v.id in hot:
                self._found(hook(v, ms, kmh))

    def _changed(self, v: Vehicle, ms: int) -> None:
        """Moving, a slot or the trip changed: tell the rules and the driver journeys."""
        for hook in self._on_change:
            self._found(hook(v, ms))
        self._emit_drivers(v, ms)
        if v.emitted:   # the trip or profile may have changed under the drivers' feet
            ctx = v.context()
            for driver_id in v.emitted:
                d = self.drivers[driver_id]
                if d.vehicle is v and d.where and not same_place(d.where[-1][1], ctx):
                    d.where.append((ms, ctx))

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
                    for hook in self._on_trip_leave:
                        self._found(hook(trip, old, ms))
                    old.set_trip(None)
                    self._changed(old, ms)
                trip.vehicle = v.id
            if v.trip is not None and v.trip is not trip:
                self._end_trip(v, v.trip, ms)
            if trip is None:
                line = self.registry.lines.get(rec["line"])
                profile = self.profiles[line.profile] if line is not None else self.default
                trip = Trip(trip_id, rec["line"], line, profile, ms, v.id)
                for hook in self._on_trip_start:
                    self._found(hook(trip, v, ms))
                self.trips[trip_id] = trip
            v.set_trip(trip)
            self._changed(v, ms)
        elif v.trip is not None and v.trip.id == trip_id:
            self._end_trip(v, v.trip, ms)
            self._changed(v, ms)

    def _end_trip(self, v: Vehicle, trip: Trip, ms: int) -> None:
        for hook in self._on_trip_end:
            self._found(hook(trip, v, ms))
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
        here = d.vehicle.context() if d.vehicle is not None else None
        if d.act is None:
            d.act, d.since = effective, ms
            d.where = [] if here is None else [(ms, here)]
        elif effective != d.act:
            if ms > d.since and d.vehicle is not None:
                where = Whereabouts(d.where or [(d.since, d.vehicle.context())])
                for hook in self._on_segment:
                    self._found(hook(d.id, d.since, ms, d.act, where))
            d.act, d.since = effective, ms
            d.where = [] if here is None else [(ms, here)]
        elif here is not None and d.where and not same_place(d.where[-1][1], here):
            d.where.append((ms, here))     # the same activity in another vehicle

    # ---- output --------------------------------------------------------------------------
    def findings(self, as_of_ms: int | None = None) -> list[Finding]:
        """Every finding so far, open episodes judged at ``as_of`` (default: the latest record)."""
        self.flush(final=True)
        as_of = as_of_ms if as_of_ms is not None else (self.latest_ms or 0)
        result: dict[str, Finding] = dict(self.closed)
        off = self._off
        for hook in self._open:
            for found in hook(as_of):
                if found is not None and (found["profile"], found["rule"]) not in off:
                    result[found["id"]] = found
        return sorted(result.values(), key=sort_key)


def evaluate(registry: Registry, profiles: dict[str, Profile], records: Iterable[Record],
             default_profile: str = "SP", as_of_ms: int | None = None) -> list[Finding]:
    """One-shot evaluation of a set of records (any order)."""
    engine = Engine(registry, profiles, default_profile)
    engine.add(records)
    return engine.findings(as_of_ms)

