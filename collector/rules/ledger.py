"""Deadlines that a ``report`` record closes (``trip.assistance_due``, ``trip.report_due``,
``trip.accident_data``) and the monthly ``occupancy.index`` per line.

Both outlive the trip that opened them, so the engine keeps one :class:`Ledger` and one
:class:`IndexBook` for the whole evaluation (they are rebuilt with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from collector.registry import Line
from collector.rules.finding import Finding, build, finding_id
from collector.rules.params import IndexParams
from collector.rules.profile import Profile
from protocols.records import ms_to_ts

ASSISTANCE = "trip.assistance_due"
REPORT_DUE = "trip.report_due"
ACCIDENT_DATA = "trip.accident_data"
INDEX = "occupancy.index"


@dataclass
class Deadline:
    """An obligation with a due time, closed by the first ``report`` that answers it."""

    rule: str
    profile: Profile
    vehicle: str
    driver: str | None
    trip: str | None
    line: str | None
    start_ms: int
    due_ms: int
    #: the incident it answers (a report may name it by ``incident_ts``)
    incident_ms: int | None
    #: answered by a report ``to: passengers`` (assistance) rather than to an authority
    passengers: bool
    details: dict[str, Any]
    closed_ms: int | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = finding_id(self.rule, self.vehicle, self.trip, self.start_ms)


@dataclass(frozen=True)
class Report:
    """A ``report`` record: the operator recorded that an obligation was met."""

    ms: int
    vehicle: str
    finding: str | None
    incident_ms: int | None
    to: str


def answers(report: Report, d: Deadline) -> bool:
    """Whether a report closes a deadline: by the deadline's id, or by its incident's time (and
    ``to: passengers`` for assistance, an authority otherwise)."""
    if report.finding is not None:
        return report.finding == d.id
    return (report.incident_ms is not None and report.incident_ms == d.incident_ms
            and report.vehicle == d.vehicle and (report.to == "passengers") == d.passengers)


def deadline_finding(d: Deadline, as_of: int) -> Finding:
    """The finding of a deadline: closed at its report, else open and maybe overdue at ``as_of``."""
    cfg = d.profile.rules[d.rule]
    details: dict[str, Any] = {"due": ms_to_ts(d.due_ms), **d.details}
    if d.closed_ms is None:
        details["open"] = True
        details["overdue"] = as_of > d.due_ms
    else:
        details["overdue"] = d.closed_ms > d.due_ms
    return build(cfg, d.profile, subject=d.vehicle, vehicle=d.vehicle, driver=d.driver,
                 trip=d.trip, line=d.line, start_ms=d.start_ms, end_ms=d.closed_ms,
                 details=details)


class Ledger:
    """Every deadline opened so far and every report seen."""

    def __init__(self) -> None:
        self.deadlines: dict[str, Deadline] = {}
        self.reports: list[Report] = []

    def _answer(self, d: Deadline) -> None:
        for report in self.reports:
            if answers(report, d):
                d.closed_ms = max(report.ms, d.start_ms)
                return

    def open(self, d: Deadline) -> Finding | None:
        """Register a deadline; the finding if an earlier report closed it."""
        if d.id in self.deadlines:
            return None
        self._answer(d)
        self.deadlines[d.id] = d
        return deadline_finding(d, d.start_ms) if d.closed_ms is not None else None

    def preview(self, d: Deadline, as_of: int) -> Finding | None:
        """A deadline that would open from an episode still running at ``as_of`` (not kept)."""
        if d.start_ms > as_of:
            return None
        known = self.deadlines.get(d.id)
        if known is not None:
            return deadline_finding(known, as_of)
        self._answer(d)
        return deadline_finding(d, as_of)

    def report(self, report: Report) -> list[Finding]:
        """A report: close the open deadlines it answers; their findings."""
        self.reports.append(report)
        closed: list[Finding] = []
        for d in self.deadlines.values():
            if d.closed_ms is None and answers(report, d):
                d.closed_ms = max(report.ms, d.start_ms)
                closed.append(deadline_finding(d, report.ms))
        return closed

    def pending(self, as_of: int) -> list[Finding]:
        """The deadlines still open at ``as_of``."""
        return [deadline_finding(d, as_of) for d in self.deadlines.values()
                if d.closed_ms is None]


def month_bounds(ms: int, profile: Profile) -> tuple[int, int, str]:
    """The local month (profile's time zone) holding ``ms``: (first instant, next month's, label)."""
    local = datetime.fromtimestamp(ms / 1000, profile.tz)
    first = datetime(local.year, local.month, 1, tzinfo=profile.tz)
    nxt = datetime(local.year + local.month // 12, local.month % 12 + 1, 1, tzinfo=profile.tz)
    return int(first.timestamp() * 1000), int(nxt.timestamp() * 1000), f"{local:%Y-%m}"


@dataclass
class MonthLine:
    """Passenger-km and seat-km of one line in one local month."""

    line: Line
    profile: Profile
    start_ms: int
    end_ms: int
    label: str
    passenger_km: float = 0.0
    seat_km: float = 0.0
    trips: int = 0
    passengers: int = 0


def index_finding(m: MonthLine) -> Finding | None:
    """``occupancy.index`` of a finished month: passenger-km / (seats × line length)."""
    cfg = m.profile.rules[INDEX]
    if m.seat_km <= 0:
        return None
    params: IndexParams = cfg.params
    index = m.passenger_km / m.seat_km
    details: dict[str, Any] = {
        "month": m.label, "trips": m.trips, "passengers": m.passengers,
        "passenger_km": round(m.passenger_km, 1),
        "seat_km": round(m.seat_km, 1), "index": round(index, 3),
    }
    limit = params.limits.get(m.line.service)
    if limit is not None:
        details["limit"] = limit
        details["tolerance"] = params.tolerance
        details["insufficient"] = index > limit + params.tolerance
    return build(cfg, m.profile, subject=m.line.id, vehicle=None, driver=None, trip=None,
                 line=m.line.id, start_ms=m.start_ms, end_ms=m.end_ms, details=details)


class IndexBook:
    """Per (line, local month): the trips that started in it, their passenger-km and seat-km."""

    def __init__(self) -> None:
        self.months: dict[tuple[str, int], MonthLine] = {}

    @staticmethod
    def _add(months: dict[tuple[str, int], MonthLine], line: Line, profile: Profile,
             start_ms: int, passenger_km: float, seats: int, passengers: int) -> None:
        lo, hi, label = month_bounds(start_ms, profile)
        key = (line.id, lo)
        m = months.get(key)
        if m is None:
            m = months[key] = MonthLine(line, profile, lo, hi, label)
        m.passenger_km += passenger_km
        m.passengers += passengers
        m.seat_km += seats * line.length_km
        m.trips += 1

    def add(self, line: Line, profile: Profile, start_ms: int, passenger_km: float,
            seats: int, passengers: int) -> None:
        """A finished trip."""
        self._add(self.months, line, profile, start_ms, passenger_km, seats, passengers)

    def with_running(self, running: list[tuple[Line, Profile, int, float, int, int]]
                     ) -> list[MonthLine]:
        """Every (line, month) so far, trips still running counted so far (no state change)."""
        months = {key: MonthLine(m.line, m.profile, m.start_ms, m.end_ms, m.label,
                                 m.passenger_km, m.seat_km, m.trips, m.passengers)
                  for key, m in self.months.items()}
        for item in running:
            self._add(months, *item)
        return list(months.values())

    def findings(self, as_of: int,
                 running: list[tuple[Line, Profile, int, float, int, int]]) -> list[Finding]:
        """The months over at ``as_of`` (trips still running counted so far)."""
        out: list[Finding] = []
        for m in self.with_running(running):
            if m.end_ms <= as_of:
                found = index_finding(m)
                if found is not None:
                    out.append(found)
        return out
