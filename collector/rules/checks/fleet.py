"""The fleet against the registry's vehicle data (``manufactured``, ``inspections``):
``fleet.inspection_expired`` (SP 62 §1, 64; BA 50, 98 IV k) and ``fleet.age`` (SP 61 §1).

- ``fleet.inspection_expired``: a vehicle in service (a ``trip start`` on it, a replacement's
  included) after its annual inspection (vistoria) lapsed — ``valid_months`` after the latest
  inspection date on or before the trip's local day (the vehicle's home profile's zone). One
  finding per lapse: from the first trip started while lapsed to the end of the last one (open
  while it runs), under the profile of the first such trip's line. A vehicle without
  ``inspections`` is not judged (nothing to judge it by).
- ``fleet.age``: at ``as_of``, more than ``max_share_pct`` % of a profile's fleet (the registry's
  vehicles with ``manufactured`` whose home profile it is, or the default profile for those
  without one) older than ``max_age_years`` (age = the local year of ``as_of`` − the year of
  manufacture). BA 49's useful life by service is not modelled (the catalogue, docs/rules.md,
  gives 5/10/15 years without the services): off in BA.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from collector.rules.context import Vehicle
from collector.rules.finding import Finding, build
from collector.rules.profile import Profile
from collector.rules.rule import RuleBase, RuleContext
from protocols.records import Record, ms_to_ts

EXPIRED = "fleet.inspection_expired"
AGE = "fleet.age"


@dataclass(frozen=True)
class InspectionParams:
    """``fleet.inspection_expired``: an inspection is valid for ``valid_months`` (annual)."""

    valid_months: int = 12


@dataclass(frozen=True)
class AgeParams:
    """``fleet.age``: at most ``max_share_pct`` % of the fleet older than ``max_age_years``."""

    max_age_years: int = 10
    max_share_pct: float = 20.0


@dataclass
class Lapse:
    """Trips run while one inspection had lapsed."""

    start_ms: int
    profile: Profile
    last_inspection: date | None
    expired_on: date | None
    end_ms: int | None = None
    trips: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)


def add_months(day: date, months: int) -> date:
    """The same day ``months`` later (the month's last day when it has fewer days)."""
    year, month = divmod(day.month - 1 + months, 12)
    year += day.year
    month += 1
    for last in (31, 30, 29, 28):
        try:
            return date(year, month, min(day.day, last))
        except ValueError:
            continue
    raise ValueError(day)


class Fleet(RuleBase):
    """``fleet.inspection_expired`` and ``fleet.age``."""

    params = ((EXPIRED, InspectionParams), (AGE, AgeParams))
    order = 70

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        #: vehicle → lapsed inspection date → the trips run meanwhile
        self.lapses: dict[str, dict[date | None, Lapse]] = {}
        self.seen = False

    def _home(self, vehicle: str) -> Profile:
        known = self.ctx.registry.vehicles.get(vehicle)
        name = known.profile if known is not None else None
        return (self.ctx.profiles.get(name) if name else None) or self.ctx.default

    def on_vehicle(self, v: Vehicle, ms: int) -> None:
        """Any record: there is a fleet to judge at ``as_of``."""
        self.seen = True

    def on_record(self, v: Vehicle, ms: int, rec: Record) -> None:
        """``trip start``: in service — lapsed?; ``trip end``: the lapse's trips end."""
        if rec["kind"] != "trip":
            return
        if rec["event"] == "end":
            for lapse in self.lapses.get(v.id, {}).values():
                if rec["trip"] in lapse.running:
                    lapse.running.discard(rec["trip"])
                    lapse.end_ms = ms
            return
        known = self.ctx.registry.vehicles.get(v.id)
        if known is None or not known.inspections:
            return
        day = datetime.fromtimestamp(ms / 1000, self._home(v.id).tz).date()
        done = [d for d in known.inspections if d <= day]
        last = max(done) if done else None
        line = self.ctx.registry.lines.get(rec["line"])
        profile = (self.ctx.profiles.get(line.profile) if line is not None else None) \
            or self._home(v.id)
        months = profile.rules[EXPIRED].params.valid_months
        expired_on = None if last is None else add_months(last, months)
        if expired_on is not None and day < expired_on:
            return
        mine = self.lapses.setdefault(v.id, {})
        lapse = mine.get(last) or mine.setdefault(last, Lapse(ms, profile, last, expired_on))
        lapse.trips.add(rec["trip"])
        lapse.running.add(rec["trip"])
        lapse.end_ms = None

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """The lapses (open while a trip runs) and each profile's fleet age at ``as_of``."""
        for vehicle, lapses in self.lapses.items():
            for lapse in lapses.values():
                details: dict[str, Any] = {
                    "last_inspection": None if lapse.last_inspection is None
                    else lapse.last_inspection.isoformat(),
                    "expired_on": None if lapse.expired_on is None
                    else lapse.expired_on.isoformat(),
                    "trips": len(lapse.trips),
                    "valid_months": lapse.profile.rules[EXPIRED].params.valid_months,
                }
                if lapse.running:
                    details["open"] = True
                yield build(lapse.profile.rules[EXPIRED], lapse.profile, subject=vehicle,
                            vehicle=vehicle, driver=None, trip=None, line=None,
                            start_ms=lapse.start_ms,
                            end_ms=None if lapse.running else lapse.end_ms, details=details)
        if self.seen:
            yield from self._ages(as_of)

    def _ages(self, as_of: int) -> Iterable[Finding]:
        fleets: dict[str, list[tuple[str, int]]] = {}
        for vehicle in self.ctx.registry.vehicles.values():
            if vehicle.manufactured is not None:
                fleets.setdefault(self._home(vehicle.id).name, []).append(
                    (vehicle.id, vehicle.manufactured))
        # a partition's registry (collector/partitions.py) holds one operator's fleet: judged
        # as that operator's, its id apart from another operator's
        operators = {v.operator for v in self.ctx.registry.vehicles.values()}
        operator = next(iter(operators)) if len(operators) == 1 else None
        for name, members in sorted(fleets.items()):
            profile = self.ctx.profiles[name]
            params: AgeParams = profile.rules[AGE].params
            year = datetime.fromtimestamp(as_of / 1000, profile.tz).year
            older = sorted(v for v, made in members if year - made > params.max_age_years)
            share = len(older) * 100 / len(members)
            if share <= params.max_share_pct:
                continue
            start = int(datetime(year, 1, 1, tzinfo=profile.tz).timestamp() * 1000)
            subject = f"fleet:{name}" if operator is None else f"fleet:{operator}:{name}"
            yield build(profile.rules[AGE], profile, subject=subject, vehicle=None,
                        driver=None, trip=None, line=None, start_ms=start, end_ms=None,
                        details={**({} if operator is None else {"operator": operator}),
                                 "year": year, "vehicles": len(members), "older": older,
                                 "share_pct": round(share, 1),
                                 "max_share_pct": params.max_share_pct,
                                 "max_age_years": params.max_age_years,
                                 "as_of": ms_to_ts(as_of), "open": True})


RULE = Fleet
