"""Rules part 2 in the pipeline: trips, stops, passengers, deadlines and equipment, in one rule
because they share per-vehicle state (the stop before departure, the doors open, the passengers
on board feeding passenger-km).

Hooks (see ``collector/rules/rule.py``): ``on_vehicle`` (a vehicle is taken as standing still since
its first record); ``on_change`` (trips join and leave, departures, stops and interruptions);
``on_record`` (``trip`` — before the engine handles it —, ``door``, ``incident``, ``report``,
``device``); ``on_sample`` for the vehicles in :attr:`Operations.hot` (a door open, or passengers on
board: passenger-km and doors-open-while-moving; other vehicles cost nothing); ``on_position`` (a
GPS fix: where a stop is; with speed, the registrador checks). Findings closed here go to the engine's closed set (a
finding re-emitted with the same id replaces the earlier one); ``open`` gives those still running
at ``as_of`` without changing any state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collector.registry import Line
from collector.rules import equipment, trips
from collector.rules.context import NO_TIME, Vehicle
from collector.rules.finding import Finding
from collector.rules.ledger import (
    ACCIDENT_DATA,
    ASSISTANCE,
    INDEX,
    REPORT_DUE,
    Deadline,
    IndexBook,
    Ledger,
    MonthLine,
    Report,
)
from collector.rules.params import (
    AssistanceParams,
    DoorsParams,
    IndexParams,
    InterruptionParams,
    LateDepartureParams,
    NoParams,
    PresenceParams,
    RegistradorParams,
    ReportDueParams,
    StandingParams,
)
from collector.rules.profile import Profile
from collector.rules.rule import RuleBase, RuleContext
from protocols.records import Record, RecordError, ms_to_ts, ts_to_ms

FORCE_MAJEURE = ("force_majeure", "road_blocked")
ACCIDENTS = ("accident", "accident_victims")
HOUR = 3_600_000


class VehicleOps:
    """Per vehicle: what this module last saw, the equipment state, the pending trip start."""

    __slots__ = ("equipment", "last_kmh", "last_ms", "moving", "on_board", "scheduled", "stop_lat",
                 "stop_lon", "stop_ms", "trip_id")

    def __init__(self, ms: int) -> None:
        self.moving = False
        self.trip_id: str | None = None
        self.stop_ms = ms
        self.stop_lat: float | None = None
        self.stop_lon: float | None = None
        self.scheduled: str | None = None
        self.equipment = equipment.EquipmentState()
        self.last_ms = NO_TIME
        self.last_kmh = 0.0
        #: passengers on board outside a trip: the running sum of boarded − alighted since the
        #: vehicle's previous trip end (never below 0); a trip starting here takes them along
        self.on_board = 0


def _ms(ts: Any) -> int | None:
    if not isinstance(ts, str):
        return None
    try:
        return ts_to_ms(ts)
    except RecordError:
        return None


class Operations(RuleBase):
    """Trips, stops, passengers, deadlines and equipment for one engine run."""

    params = (
        (trips.INTERRUPTION, InterruptionParams),
        (ASSISTANCE, AssistanceParams),
        (REPORT_DUE, ReportDueParams),
        (ACCIDENT_DATA, NoParams),
        (trips.PRESENCE, PresenceParams),
        (trips.LATE, LateDepartureParams),
        (trips.STANDING, StandingParams),
        (trips.OVERLOAD, NoParams),
        (trips.UNAPPROVED, NoParams),
        (equipment.DOORS, DoorsParams),
        (INDEX, IndexParams),
        (equipment.REGISTRADOR, RegistradorParams),
    )
    order = 50
    #: the vehicles in ``hot`` (a door open, or passengers on board) get their samples
    samples = "hot"
    vehicle_tables = ("vehicles",)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self.registry = ctx.registry
        self.vehicles: dict[str, VehicleOps] = {}
        self.trips: dict[str, trips.TripOps] = {}
        self.ledger = Ledger()
        self.book = IndexBook()

    # ---- hooks ---------------------------------------------------------------------------
    def on_vehicle(self, v: Vehicle, ms: int) -> None:
        """A vehicle's first record: it is taken as standing still since then."""
        self.vehicles[v.id] = VehicleOps(ms)

    def on_change(self, v: Vehicle, ms: int) -> list[Finding]:
        """The engine handled a change of moving, slots or trip."""
        vs = self.vehicles[v.id]
        out: list[Finding] = []
        now_trip = v.trip.id if v.trip is not None else None
        if vs.trip_id != now_trip:
            if vs.trip_id is not None:
                out.extend(self._leave(vs, v, ms))
            vs.trip_id = now_trip
            if now_trip is not None:
                out.extend(self._join(vs, v, ms))
        if v.moving != vs.moving:
            vs.moving = v.moving
            if v.moving:
                out.extend(self._moved(v, ms))
            else:
                vs.stop_ms, vs.stop_lat, vs.stop_lon = ms, v.lat, v.lon
                self._stopped(v, ms)
        t = self._mine(v)
        if t is not None and t.stop is not None and v.slot_activity[1] == "rest":
            t.stop.rest = True
        return out

    def on_record(self, v: Vehicle, ms: int, rec: Record) -> list[Finding]:
        """A trip, door, incident, report or device record."""
        vs = self.vehicles[v.id]
        kind = rec["kind"]
        if kind == "trip":
            if rec["event"] == "start":
                vs.scheduled = rec.get("scheduled")
            return []
        if kind == "door":
            return self._door(vs, v, ms, rec)
        if kind == "incident":
            return self._incident(v, ms, rec)
        if kind == "report":
            return self.ledger.report(Report(ms, v.id, rec.get("finding"),
                                             _ms(rec.get("incident_ts")), str(rec.get("to"))))
        if kind == "device" and rec.get("device") == "registrador":
            return equipment.device(vs.equipment, v, ms, rec["status"], rec.get("detail"))
        return []

    def on_sample(self, v: Vehicle, ms: int, kmh: float) -> Finding | None:
        """A speed sample of a hot vehicle (``v.kmh`` is already ``kmh``)."""
        vs = self.vehicles[v.id]
        t = self._mine(v)
        if t is not None and t.on_board and vs.last_ms != NO_TIME:
            t.passenger_km += t.on_board * vs.last_kmh * (ms - vs.last_ms) / HOUR
        vs.last_ms, vs.last_kmh = ms, kmh
        if vs.equipment.doors_open or vs.equipment.doors is not None:
            return equipment.doors_update(vs.equipment, v, ms)
        return None

    def on_position(self, v: Vehicle, ms: int, gps: float | None) -> list[Finding]:
        """A GPS fix: a fix taken while the vehicle stands places its stop (the fix when it
        stopped may be one taken while it still moved, short of where it stood); with speed,
        the registrador checks."""
        if not v.moving and (gps is None or gps < v.stop_kmh):
            t = self._mine(v)
            if t is not None and t.stop is not None:
                t.stop.lat, t.stop.lon = v.lat, v.lon
        if gps is None:
            return []
        return equipment.position(self.vehicles[v.id].equipment, v, ms, gps)

    # ---- trips ---------------------------------------------------------------------------
    def _mine(self, v: Vehicle) -> trips.TripOps | None:
        """The trip the vehicle is running now (None once a replacement took it over)."""
        if v.trip is None:
            return None
        t = self.trips.get(v.trip.id)
        return t if t is not None and t.vehicle == v.id else None

    def _join(self, vs: VehicleOps, v: Vehicle, ms: int) -> list[Finding]:
        trip = v.trip
        assert trip is not None
        out: list[Finding] = []
        t = self.trips.get(trip.id)
        if t is None:
            known = self.registry.vehicles.get(v.id)
            t = trips.TripOps(trip.id, trip.line_id, trip.line, trip.profile, ms, v.id,
                              known.seats if known is not None else None,
                              known.max_on_board if known is not None else None,
                              _ms(vs.scheduled))
            self.trips[trip.id] = t
            if vs.on_board:     # boarded at the terminal before the driver started the trip
                out.extend(trips.passengers(t, ms, vs.on_board, 0, v.id, v.slot_driver[1]))
                self._heat(vs, v, ms)
        else:
            if t.stop is not None:
                out.extend(trips.interruption(t, t.stop, ms, is_open=False, replacement=v.id,
                                              ledger=self.ledger))
                t.stop = None
            t.vehicle = v.id
            known = self.registry.vehicles.get(v.id)
            if known is not None:   # the replacement's seats and capacity judge the passengers
                t.seats, t.capacity = known.seats, known.max_on_board
            if t.on_board:
                self.hot.add(v.id)
        vs.scheduled = None
        if v.moving and t.departed_ms is None:
            out.extend(self._depart(t, v, ms))
        return out

    def _heat(self, vs: VehicleOps, v: Vehicle, ms: int) -> None:
        """The vehicle's samples matter from now on (passenger-km counts from ``ms``)."""
        if v.id not in self.hot:
            self.hot.add(v.id)
            vs.last_ms, vs.last_kmh = ms, v.kmh

    def _leave(self, vs: VehicleOps, v: Vehicle, ms: int) -> list[Finding]:
        vs.on_board = 0             # everyone alights at the end (or moves to the replacement)
        t = self.trips.get(vs.trip_id or "")
        if t is None or t.vehicle != v.id:
            return []
        out: list[Finding] = []
        if not vs.equipment.doors_open:     # a door still open keeps watching the speed (SP 71 II
            self.hot.discard(v.id)          # has no trip condition)
        t.unapproved = None
        if vs.trip_id in self.ctx.trips:
            return out                      # a replacement continues it: the stop stays open
        if t.stop is not None:
            out.extend(trips.interruption(t, t.stop, ms, is_open=False, replacement=None,
                                          ledger=self.ledger))
            t.stop = None
        one = trips.late_departure(t, ms) if t.departed_ms is None else None
        if one is not None:
            out.append(one)
        out.extend(trips.occupancy_open(t, ms))
        del self.trips[t.id]
        if t.line is not None and t.offered_seats is not None:
            self.book.add(t.line, t.profile, t.start_ms, t.passenger_km, t.offered_seats,
                          t.boarded)
        return out

    def _depart(self, t: trips.TripOps, v: Vehicle, ms: int) -> list[Finding]:
        vs = self.vehicles[v.id]
        t.departed_ms = ms
        t.arrived_ms = vs.stop_ms
        t.terminal = trips.terminal_at(t.line, v.lat, v.lon)
        out = [trips.late_departure(t, None), trips.presence(t, v.slot_driver[1])]
        return [f for f in out if f is not None]

    def _moved(self, v: Vehicle, ms: int) -> list[Finding]:
        t = self._mine(v)
        if t is None:
            return []
        t.unapproved = None
        if t.departed_ms is None:
            return self._depart(t, v, ms)
        if t.stop is None:
            return []
        stop, t.stop = t.stop, None
        return trips.interruption(t, stop, ms, is_open=False, replacement=None, ledger=self.ledger)

    def _stopped(self, v: Vehicle, ms: int) -> None:
        t = self._mine(v)
        if t is None or t.departed_ms is None:
            return
        t.stop = trips.Stop(ms, v.id, v.lat, v.lon, v.slot_driver[1],
                            v.slot_activity[1] == "rest", t.pending_incident)
        t.pending_incident = None

    # ---- records -------------------------------------------------------------------------
    def _door(self, vs: VehicleOps, v: Vehicle, ms: int, rec: Record) -> list[Finding]:
        out: list[Finding] = []
        door = int(rec["door"])
        if rec.get("open"):
            vs.equipment.doors_open.add(door)
        else:
            vs.equipment.doors_open.discard(door)
        one = equipment.doors_update(vs.equipment, v, ms)
        if one is not None:
            out.append(one)
        t = self._mine(v)
        boarded, alighted = int(rec.get("boarded") or 0), int(rec.get("alighted") or 0)
        if t is None:
            vs.on_board = max(0, vs.on_board + boarded - alighted)
        elif boarded or alighted:
            out.extend(trips.passengers(t, ms, boarded, alighted, v.id, v.slot_driver[1]))
            key = vs.stop_ms if not v.moving else ms
            one = trips.unapproved_stop(t, ms, key, boarded, alighted, v.lat, v.lon, v.id,
                                        v.slot_driver[1])
            if one is not None:
                out.append(one)
        if vs.equipment.doors_open or (t is not None and t.on_board):
            self._heat(vs, v, ms)
        else:
            self.hot.discard(v.id)
        return out

    def _incident(self, v: Vehicle, ms: int, rec: Record) -> list[Finding]:
        cause = str(rec["cause"])
        inc = trips.Incident(ms, cause, bool(rec.get("carrier_fault")))
        t = self._mine(v)
        if t is not None and t.departed_ms is not None:
            if t.stop is not None:
                if t.stop.incident is None:
                    t.stop.incident = inc
            elif t.pending_incident is None:
                t.pending_incident = inc
        vehicle, trip, line, profile = v.context()
        driver = v.slot_driver[1]
        out: list[Finding] = []
        if cause in FORCE_MAJEURE or cause in ACCIDENTS:
            params: ReportDueParams = profile.rules[REPORT_DUE].params
            details: dict[str, Any] = {"cause": cause, "due_h": params.due_h}
            if params.omitted_fine_days is not None:
                details["fine_after"] = ms_to_ts(ms + params.omitted_fine_days * 24 * HOUR)
            one = self.ledger.open(Deadline(REPORT_DUE, profile, vehicle, driver, trip, line, ms,
                                            ms + round(params.due_h * HOUR), ms, False, details))
            if one is not None:
                out.append(one)
        if cause == "accident_victims":
            export = {"vehicle": vehicle, "from": ms_to_ts(ms - 24 * HOUR), "to": ms_to_ts(ms)}
            one = self.ledger.open(Deadline(ACCIDENT_DATA, profile, vehicle, driver, trip, line,
                                            ms, ms, ms, False, {"cause": cause, "export": export}))
            if one is not None:
                out.append(one)
        return out

    # ---- output --------------------------------------------------------------------------
    def open(self, as_of: int) -> Iterable[Finding | None]:
        """Findings still running at ``as_of`` (no state changes)."""
        out: list[Finding | None] = []
        for t in self.trips.values():
            if t.stop is not None:
                out.extend(trips.interruption(t, t.stop, as_of, is_open=True, replacement=None,
                                              ledger=self.ledger))
            if t.departed_ms is None:
                one = trips.late_departure(t, as_of)
                if one is not None:
                    out.append(one)
            out.extend(trips.occupancy_open(t, None))
        out.extend(self.ledger.pending(as_of))
        for vid, vs in self.vehicles.items():
            v = self.ctx.vehicles[vid]
            out.append(equipment.doors_open(vs.equipment, as_of))
            out.extend(equipment.registrador_open(vs.equipment, v, as_of))
        out.extend(self.book.findings(as_of, self._running()))
        return out

    def _running(self) -> list[tuple[Line, Profile, int, float, int, int]]:
        return [(t.line, t.profile, t.start_ms, t.passenger_km, t.offered_seats, t.boarded)
                for t in self.trips.values()
                if t.line is not None and t.offered_seats is not None]

    def month_lines(self) -> list[MonthLine]:
        """Per line and local month of the trips' start: trips, passengers transported,
        passenger-km and seat-km so far (``frota collector stats``; BA 35 II)."""
        return self.book.with_running(self._running())


RULE = Operations
