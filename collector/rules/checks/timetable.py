"""The timetable the operator promised (registry ``lines[].timetable``) against the trips it ran:
``schedule.trip_not_run`` (BA 98 IV j; TO 104 IV a) and ``schedule.service_level`` (BA 103 II).

Both are judged at ``as_of`` over the departures scheduled from the timetable's ``valid_from``
(else the first record seen) to ``as_of``: a departure is *run* when a trip of its line started
with ``scheduled`` within ``tolerance_min`` of it (a trip without ``scheduled``: its start), each
trip answering one departure (the earliest it can); a replacement vehicle's ``trip start`` of a
trip already running is not a new trip. Departures are local times in the line's profile's zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from collector.registry import Line
from collector.rules.context import Vehicle
from collector.rules.finding import Finding, build
from collector.rules.profile import Profile
from collector.rules.rule import RuleBase, RuleContext
from protocols.records import Record, RecordError, ms_to_ts, ts_to_ms

NOT_RUN = "schedule.trip_not_run"
SERVICE_LEVEL = "schedule.service_level"
MINUTE = 60_000


@dataclass(frozen=True)
class TripNotRunParams:
    """``schedule.trip_not_run``: a trip started within ``tolerance_min`` of the scheduled
    departure runs it (BA 59's 10 minutes for lateness)."""

    tolerance_min: float = 10.0


@dataclass(frozen=True)
class ServiceLevelParams:
    """``schedule.service_level``: ``min_pct`` % or fewer of the scheduled trips run in
    ``window_days`` consecutive days (BA 103 II: 70 % in 30 days)."""

    window_days: int = 30
    min_pct: float = 70.0


@dataclass
class LineRuns:
    """The trips of one line: (when they answer a departure, trip id), and the trip ids seen."""

    starts: list[int]
    ids: set[str]


def local_ms(day: date, hhmm: str, profile: Profile) -> int:
    """A local wall-clock time of a day in the profile's zone, in ms."""
    hours, minutes = hhmm.split(":")
    wall = datetime(day.year, day.month, day.day, int(hours), int(minutes), tzinfo=profile.tz)
    return int(wall.timestamp() * 1000)


def _day_of(ms: int, profile: Profile) -> date:
    return datetime.fromtimestamp(ms / 1000, profile.tz).date()


def departures(line: Line, profile: Profile, start_ms: int, end_ms: int) -> list[int]:
    """The line's scheduled departures in [start_ms, end_ms], in order."""
    table = line.timetable
    if table is None or end_ms < start_ms:
        return []
    out: list[int] = []
    day = _day_of(start_ms, profile)
    last = _day_of(end_ms, profile)
    while day <= last:
        in_force = (table.valid_from is None or day >= table.valid_from) and \
            (table.valid_until is None or day < table.valid_until)
        if in_force:
            for dep in table.departures:
                if dep.runs_on(day):
                    ms = local_ms(day, dep.time, profile)
                    if start_ms <= ms <= end_ms:
                        out.append(ms)
        day += timedelta(days=1)
    return sorted(out)


def match(scheduled: list[int], starts: list[int], tolerance_ms: int) -> list[bool]:
    """For each departure (in order), whether a trip answers it: each trip the earliest
    departure within the tolerance that no earlier trip took (one pass over both, in order)."""
    trips = sorted(starts)
    run: list[bool] = []
    j = 0
    for dep in scheduled:
        while j < len(trips) and trips[j] < dep - tolerance_ms:
            j += 1                      # too early for this departure, so for every later one
        if j < len(trips) and trips[j] <= dep + tolerance_ms:
            run.append(True)
            j += 1
        else:
            run.append(False)
    return run


class Timetable(RuleBase):
    """``schedule.trip_not_run`` and ``schedule.service_level`` over every line with a
    timetable."""

    params = ((NOT_RUN, TripNotRunParams), (SERVICE_LEVEL, ServiceLevelParams))
    order = 60

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self.first_ms: int | None = None
        self.runs: dict[str, LineRuns] = {}

    def on_vehicle(self, v: Vehicle, ms: int) -> None:
        """The first record of the run bounds the departures checked (without ``valid_from``)."""
        if self.first_ms is None or ms < self.first_ms:
            self.first_ms = ms

    def on_record(self, v: Vehicle, ms: int, rec: Record) -> None:
        """A ``trip start``: a run of its line (the same trip id again is a replacement)."""
        if rec["kind"] != "trip" or rec["event"] != "start":
            return
        runs = self.runs.setdefault(rec["line"], LineRuns([], set()))
        if rec["trip"] in runs.ids:
            return
        runs.ids.add(rec["trip"])
        at = ms
        scheduled = rec.get("scheduled")
        if isinstance(scheduled, str):
            try:
                at = ts_to_ms(scheduled)
            except RecordError:
                at = ms
        runs.starts.append(at)

    def _start_ms(self, line: Line, profile: Profile) -> int | None:
        table = line.timetable
        if table is not None and table.valid_from is not None:
            return local_ms(table.valid_from, "00:00", profile)
        return self.first_ms

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """Every departure not run by ``as_of`` (once its tolerance is over) and every stretch
        of ``window_days`` under the service level."""
        for line in self.ctx.registry.lines.values():
            if line.timetable is None:
                continue
            profile = self.ctx.profiles.get(line.profile) or self.ctx.default
            start = self._start_ms(line, profile)
            if start is None:
                continue
            tolerance = round(profile.rules[NOT_RUN].params.tolerance_min * MINUTE)
            scheduled = departures(line, profile, start, as_of)
            runs = self.runs.get(line.id)
            run = match(scheduled, runs.starts if runs is not None else [], tolerance)
            for dep, ok in zip(scheduled, run, strict=True):
                if not ok and dep + tolerance < as_of:
                    yield self._not_run(line, profile, dep, tolerance)
            yield from self._service_level(line, profile, start, as_of, scheduled, run)

    def counts(self, line: Line, start_ms: int, end_ms: int) -> tuple[int, int]:
        """(departures scheduled, run) of a line in [start_ms, end_ms] (``frota collector
        stats``), matched as the rules match them."""
        profile = self.ctx.profiles.get(line.profile) or self.ctx.default
        first = self._start_ms(line, profile)
        if first is None or line.timetable is None:
            return 0, 0
        tolerance = round(profile.rules[NOT_RUN].params.tolerance_min * MINUTE)
        scheduled = departures(line, profile, first, end_ms)
        runs = self.runs.get(line.id)
        run = match(scheduled, runs.starts if runs is not None else [], tolerance)
        inside = [ok for dep, ok in zip(scheduled, run, strict=True) if dep >= start_ms]
        return len(inside), sum(inside)

    def _not_run(self, line: Line, profile: Profile, dep: int, tolerance: int) -> Finding:
        assert line.timetable is not None
        details: dict[str, Any] = {
            "scheduled": ms_to_ts(dep), "tolerance_min": tolerance / MINUTE,
            "service_order": line.timetable.service_order,
        }
        return build(profile.rules[NOT_RUN], profile, subject=line.id, vehicle=None, driver=None,
                     trip=None, line=line.id, start_ms=dep, end_ms=dep + tolerance,
                     details=details)

    def _service_level(self, line: Line, profile: Profile, start: int, as_of: int,
                       scheduled: list[int], run: list[bool]) -> Iterator[Finding]:
        params: ServiceLevelParams = profile.rules[SERVICE_LEVEL].params
        first = _day_of(start, profile)
        if local_ms(first, "00:00", profile) < start:
            first += timedelta(days=1)          # only whole days
        last = _day_of(as_of, profile) - timedelta(days=1)   # the last day over at as_of
        per_day: dict[date, list[int]] = {}
        for dep, ok in zip(scheduled, run, strict=True):
            counts = per_day.setdefault(_day_of(dep, profile), [0, 0])
            counts[0] += 1
            counts[1] += ok
        window = timedelta(days=params.window_days)
        episode: list[tuple[date, int, int]] = []     # (window's first day, scheduled, run)
        day = first
        while day + window - timedelta(days=1) <= last:
            total = ran = 0
            for i in range(params.window_days):
                counts = per_day.get(day + timedelta(days=i), [0, 0])
                total += counts[0]
                ran += counts[1]
            if total and ran * 100 <= params.min_pct * total:
                episode.append((day, total, ran))
            elif episode:
                yield self._level_finding(line, profile, episode, params)
                episode = []
            day += timedelta(days=1)
        if episode:
            yield self._level_finding(line, profile, episode, params)

    def _level_finding(self, line: Line, profile: Profile, episode: list[tuple[date, int, int]],
                       params: ServiceLevelParams) -> Finding:
        worst = min(episode, key=lambda w: (w[2] / w[1], w[0]))
        span = timedelta(days=params.window_days)
        details: dict[str, Any] = {
            "worst_window": [worst[0].isoformat(), (worst[0] + span - timedelta(days=1)).isoformat()],
            "scheduled": worst[1], "run": worst[2],
            "run_pct": round(worst[2] * 100 / worst[1], 1),
            "min_pct": params.min_pct, "window_days": params.window_days,
            "service_order": line.timetable.service_order if line.timetable else None,
        }
        return build(profile.rules[SERVICE_LEVEL], profile, subject=line.id, vehicle=None,
                     driver=None, trip=None, line=line.id,
                     start_ms=local_ms(episode[0][0], "00:00", profile),
                     end_ms=local_ms(episode[-1][0] + span, "00:00", profile), details=details)


RULE = Timetable
