"""A trip's operation (docs/rules.md): departure, stops, interruptions, schedule, passengers.

Pure functions over a :class:`TripOps` state; :mod:`collector.rules.operations` feeds them. Rules:
``trip.interruption`` (with the deadlines it opens: ``trip.assistance_due``, BA's long-interruption
``trip.report_due``), ``schedule.presence``, ``schedule.late_departure``, ``occupancy.standing``,
``occupancy.overload``, ``stops.unapproved``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from collector.registry import Line
from collector.rules.context import distance_m
from collector.rules.finding import Finding, build, minutes
from collector.rules.ledger import ASSISTANCE, REPORT_DUE, Deadline, Ledger
from collector.rules.params import (
    AssistanceParams,
    InterruptionParams,
    LateDepartureParams,
    PresenceParams,
    ReportDueParams,
    StandingParams,
)
from collector.rules.profile import Profile
from protocols.records import ms_to_ts

INTERRUPTION = "trip.interruption"
PRESENCE = "schedule.presence"
LATE = "schedule.late_departure"
STANDING = "occupancy.standing"
OVERLOAD = "occupancy.overload"
UNAPPROVED = "stops.unapproved"
HOUR = 3_600_000
MINUTE = 60_000


@dataclass(frozen=True)
class Incident:
    """An ``incident`` record."""

    ms: int
    cause: str
    carrier_fault: bool


@dataclass
class Stop:
    """A stop of the trip's vehicle after departure."""

    start_ms: int
    vehicle: str
    lat: float | None
    lon: float | None
    driver: str | None
    rest: bool
    incident: Incident | None


@dataclass
class Episode:
    """Passengers above a limit: from ``start_ms``, the peak so far."""

    start_ms: int
    vehicle: str
    driver: str | None
    peak: int
    limit: int


class TripOps:
    """One trip's operation, following it to a replacement vehicle."""

    def __init__(self, trip_id: str, line_id: str, line: Line | None, profile: Profile,
                 start_ms: int, vehicle: str, seats: int | None, capacity: int | None,
                 scheduled_ms: int | None) -> None:
        self.id = trip_id
        self.line_id = line_id
        self.line = line
        self.profile = profile
        self.start_ms = start_ms
        self.vehicle = vehicle
        self.seats = seats
        self.capacity = capacity
        #: the seats the trip was offered with (its first vehicle): the index's seat-km
        self.offered_seats = seats
        self.scheduled_ms = scheduled_ms
        self.departed_ms: int | None = None
        self.terminal: str | None = None
        #: when the vehicle had stopped before departing (it stood still since then)
        self.arrived_ms: int | None = None
        self.stop: Stop | None = None
        self.pending_incident: Incident | None = None
        self.on_board = 0
        #: passengers transported: on board at trip start plus those who boarded since
        self.boarded = 0
        self.passenger_km = 0.0
        self.standing: Episode | None = None
        self.overload: Episode | None = None
        #: the current stop's boarding/alighting outside every approved point
        self.unapproved: dict[str, Any] | None = None


# ---- places ------------------------------------------------------------------------------
def nearest_point(line: Line | None, lat: float | None,
                  lon: float | None) -> tuple[str | None, float | None, bool]:
    """(nearest point's name, its distance in m, whether the position is within any point)."""
    if line is None or lat is None or lon is None or not line.points:
        return None, None, False
    best: tuple[float, str] | None = None
    inside = False
    for point in line.points:
        d = distance_m(lat, lon, point.lat, point.lon)
        inside = inside or d <= point.radius_m
        if best is None or d < best[0]:
            best = (d, point.name)
    assert best is not None
    return best[1], round(best[0]), inside


def terminal_at(line: Line | None, lat: float | None, lon: float | None) -> str | None:
    """The line's terminal within whose radius the position is (docs/rules.md's departure terminal)."""
    if line is None or lat is None or lon is None:
        return None
    for point in line.points:
        if point.kind == "terminal" and distance_m(lat, lon, point.lat, point.lon) <= point.radius_m:
            return point.name
    return None


# ---- interruption ------------------------------------------------------------------------
def interrupts(t: TripOps, stop: Stop, end_ms: int) -> bool:
    """A stop is an interruption when an incident was declared, or when it lasts
    ``interruption_after_min`` away from every approved point without rest declared."""
    if stop.incident is not None:
        return True
    if stop.rest:
        return False
    params: InterruptionParams = t.profile.rules[INTERRUPTION].params
    if end_ms - stop.start_ms < params.interruption_after_min * MINUTE:
        return False
    _, _, inside = nearest_point(t.line, stop.lat, stop.lon)
    return stop.lat is not None and not inside


def interruption(t: TripOps, stop: Stop, end_ms: int, *, is_open: bool,
                 replacement: str | None, ledger: Ledger) -> list[Finding]:
    """The interruption finding and the deadlines it opens (kept in the ledger when closed,
    previewed when ``is_open``)."""
    if not interrupts(t, stop, end_ms):
        return []
    cfg = t.profile.rules[INTERRUPTION]
    params: InterruptionParams = cfg.params
    duration = end_ms - stop.start_ms
    inc = stop.incident
    details: dict[str, Any] = {
        "duration_min": minutes(duration),
        "interruption_after_min": params.interruption_after_min,
        "cause": inc.cause if inc is not None else None,
        "carrier_fault": inc.carrier_fault if inc is not None else None,
        "lat": stop.lat, "lon": stop.lon,
        "replacement": replacement,
    }
    severity = cfg.severity
    if params.limit_min is not None:
        details["limit_min"] = params.limit_min
        if duration <= params.limit_min * MINUTE:
            severity = "report"
    if is_open:
        details["open"] = True
    found = build(cfg, t.profile, subject=t.id, vehicle=stop.vehicle, driver=stop.driver,
                  trip=t.id, line=t.line_id, start_ms=stop.start_ms,
                  end_ms=None if is_open else end_ms, details=details)
    found["severity"] = severity
    out = [found]
    for d in _deadlines(t, stop, duration):
        one = ledger.preview(d, end_ms) if is_open else ledger.open(d)
        if one is not None:
            out.append(one)
    return out


def _deadlines(t: TripOps, stop: Stop, duration: int) -> list[Deadline]:
    """What an interruption of ``duration`` obliges: assistance (carrier at fault), BA's report."""
    out: list[Deadline] = []
    inc = stop.incident
    assist: AssistanceParams = t.profile.rules[ASSISTANCE].params
    if inc is not None and (inc.carrier_fault or not assist.carrier_fault_only):
        after = 0 if assist.after_h is None else round(assist.after_h * HOUR)
        if assist.after_h is None or duration > after:
            start = stop.start_ms + after
            # due at once (SP 39 §1, BA 58 §2), or after the operator's grace
            due = start + round(assist.grace_min * MINUTE)
            out.append(Deadline(ASSISTANCE, t.profile, stop.vehicle, stop.driver, t.id, t.line_id,
                                start, due, inc.ms, True,
                                {"cause": inc.cause, "after_h": assist.after_h,
                                 "grace_min": assist.grace_min,
                                 "interruption_start": ms_to_ts(stop.start_ms)}))
    report: ReportDueParams = t.profile.rules[REPORT_DUE].params
    if report.long_interruption_h is not None:
        after = round(report.long_interruption_h * HOUR)
        if duration > after:
            start = stop.start_ms + after
            details: dict[str, Any] = {"cause": "long_interruption",
                                       "long_interruption_h": report.long_interruption_h,
                                       "interruption_start": ms_to_ts(stop.start_ms),
                                       "due_h": report.due_h}
            if report.omitted_fine_days is not None:
                details["fine_after"] = ms_to_ts(start + report.omitted_fine_days * 24 * HOUR)
            out.append(Deadline(REPORT_DUE, t.profile, stop.vehicle, stop.driver, t.id, t.line_id,
                                start, start + round(report.due_h * HOUR),
                                inc.ms if inc is not None else None, False, details))
    return out


# ---- schedule ----------------------------------------------------------------------------
def late_departure(t: TripOps, as_of: int | None) -> Finding | None:
    """``schedule.late_departure``: departed (or, at ``as_of``, not yet) after scheduled +
    tolerance."""
    cfg = t.profile.rules[LATE]
    if t.scheduled_ms is None:
        return None
    params: LateDepartureParams = cfg.params
    depart = t.departed_ms if t.departed_ms is not None else as_of
    if depart is None or depart <= t.scheduled_ms + params.tolerance_min * MINUTE:
        return None
    details: dict[str, Any] = {
        "scheduled": ms_to_ts(t.scheduled_ms),
        "departure": None if t.departed_ms is None else ms_to_ts(t.departed_ms),
        "late_min": minutes(depart - t.scheduled_ms), "tolerance_min": params.tolerance_min,
    }
    if t.departed_ms is None:
        details["open"] = True
    return build(cfg, t.profile, subject=t.id, vehicle=t.vehicle, driver=None, trip=t.id,
                 line=t.line_id, start_ms=t.scheduled_ms, end_ms=t.departed_ms, details=details)


def presence(t: TripOps, driver: str | None) -> Finding | None:
    """``schedule.presence`` at departure: the vehicle stood within the departure terminal's radius
    from ``before_min`` before the scheduled time until it departed."""
    cfg = t.profile.rules[PRESENCE]
    if t.scheduled_ms is None or t.departed_ms is None:
        return None
    params: PresenceParams = cfg.params
    if t.line is not None and t.line.service in params.exempt_services:
        return None
    window = t.scheduled_ms - round(params.before_min * MINUTE)
    if t.departed_ms <= window:
        return None
    if t.terminal is not None and t.arrived_ms is not None and t.arrived_ms <= window:
        return None
    details = {
        "scheduled": ms_to_ts(t.scheduled_ms), "before_min": params.before_min,
        "terminal": t.terminal,
        "arrived": None if t.arrived_ms is None or t.terminal is None else ms_to_ts(t.arrived_ms),
        "departure": ms_to_ts(t.departed_ms),
    }
    return build(cfg, t.profile, subject=t.id, vehicle=t.vehicle, driver=driver, trip=t.id,
                 line=t.line_id, start_ms=window, end_ms=t.departed_ms, details=details)


# ---- passengers --------------------------------------------------------------------------
def standing_limit(t: TripOps) -> int | None:
    """Passengers allowed on board before ``occupancy.standing``: the seats, or where standing is
    allowed the capacity (TO semi-urban: seats + 40 %, within the capacity)."""
    if t.seats is None:
        return None
    params: StandingParams = t.profile.rules[STANDING].params
    line = t.line
    allowed = line is not None and line.service in params.standing_services
    if line is not None and line.standing_allowed is not None:
        allowed = line.standing_allowed
    if not allowed:
        return t.seats
    cap = t.capacity if t.capacity is not None else t.seats
    if params.semiurban_pct is not None and line is not None and line.service == "semiurbano" \
            and line.standing_allowed is None:
        return min(cap, t.seats + math.floor(t.seats * params.semiurban_pct / 100))
    return cap


def _episode_finding(t: TripOps, rule: str, ep: Episode, end_ms: int | None) -> Finding | None:
    cfg = t.profile.rules[rule]
    details: dict[str, Any] = {"peak_on_board": ep.peak, "seats": t.seats}
    if rule == STANDING:
        details["limit"] = ep.limit
        details["standing"] = max(0, ep.peak - (t.seats or 0))
    else:
        details["capacity"] = ep.limit
        details["excess"] = ep.peak - ep.limit
    if end_ms is None:
        details["open"] = True
    return build(cfg, t.profile, subject=ep.vehicle, vehicle=ep.vehicle, driver=ep.driver,
                 trip=t.id, line=t.line_id, start_ms=ep.start_ms, end_ms=end_ms, details=details)


def _track(t: TripOps, rule: str, ep: Episode | None, limit: int | None, ms: int, vehicle: str,
           driver: str | None) -> tuple[Episode | None, Finding | None]:
    if limit is not None and t.on_board > limit:
        if ep is None:
            return Episode(ms, vehicle, driver, t.on_board, limit), None
        ep.peak = max(ep.peak, t.on_board)
        return ep, None
    if ep is not None:
        return None, _episode_finding(t, rule, ep, ms)
    return None, None


def passengers(t: TripOps, ms: int, boarded: int, alighted: int, vehicle: str,
               driver: str | None) -> list[Finding]:
    """A door record (or, at trip start, those who boarded before it): passengers on board =
    running sum of boarded − alighted (never below 0)."""
    t.on_board = max(0, t.on_board + boarded - alighted)
    t.boarded += boarded
    out: list[Finding] = []
    t.standing, one = _track(t, STANDING, t.standing, standing_limit(t), ms, vehicle, driver)
    if one is not None:
        out.append(one)
    t.overload, one = _track(t, OVERLOAD, t.overload, t.capacity, ms, vehicle, driver)
    if one is not None:
        out.append(one)
    return out


def occupancy_open(t: TripOps, end_ms: int | None) -> list[Finding]:
    """The passenger episodes still running (closed at ``end_ms``, or open)."""
    out: list[Finding] = []
    for rule, ep in ((STANDING, t.standing), (OVERLOAD, t.overload)):
        if ep is not None:
            one = _episode_finding(t, rule, ep, end_ms)
            if one is not None:
                out.append(one)
    return out


def unapproved_stop(t: TripOps, ms: int, stop_key: int, boarded: int, alighted: int,
                    lat: float | None, lon: float | None, vehicle: str,
                    driver: str | None) -> Finding | None:
    """Boarding or alighting outside every approved point of the line: one finding per stop,
    growing with each door record of that stop (same id)."""
    cfg = t.profile.rules[UNAPPROVED]
    if boarded + alighted <= 0 or t.line is None or lat is None:
        return None
    name, dist, inside = nearest_point(t.line, lat, lon)
    if inside:
        return None
    acc = t.unapproved
    if acc is None or acc["stop"] != stop_key or acc["vehicle"] != vehicle:
        acc = t.unapproved = {"stop": stop_key, "vehicle": vehicle, "start": ms, "driver": driver,
                              "boarded": 0, "alighted": 0, "lat": lat, "lon": lon}
    acc["boarded"] += boarded
    acc["alighted"] += alighted
    details = {"boarded": acc["boarded"], "alighted": acc["alighted"], "lat": acc["lat"],
               "lon": acc["lon"], "nearest_point": name, "nearest_m": dist}
    return build(cfg, t.profile, subject=vehicle, vehicle=vehicle, driver=acc["driver"], trip=t.id,
                 line=t.line_id, start_ms=acc["start"], end_ms=ms, details=details)
