"""Monthly statistics per line (BA 35 II: passengers transported and trips made, by the 20th of
the next month; SP 15 §2's occupancy figures), computed by the rules engine over the stored
records, as data for people and the pages (``frota collector stats``; docs/rules.md).

A line's month is local (its profile's zone); a trip counts in the month it started. Trips,
passengers and passenger-km count the trips of registered vehicles (seat-km needs their seats);
``scheduled`` and ``run`` come from the line's timetable, matched as ``schedule.trip_not_run``
matches them (None without a timetable). ``complete`` says whether the month was over at
``as_of``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from collector.registry import Registry
from collector.rules.checks.operations import Operations
from collector.rules.checks.timetable import Timetable
from collector.rules.engine import Engine
from collector.rules.profile import Profile

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])\Z")
FIELDS = ("month", "line", "profile", "trips", "passengers", "passenger_km", "seat_km", "index",
          "scheduled", "run", "complete")


class StatsError(ValueError):
    """A month that is not YYYY-MM, or a line the registry does not have."""


def month_range(month: str, profile: Profile) -> tuple[int, int]:
    """The local month's first instant and the next month's, in ms."""
    found = MONTH.match(month)
    if found is None:
        raise StatsError(f"month {month!r} is not YYYY-MM (e.g. 2026-03)")
    year, number = int(found.group(1)), int(found.group(2))
    first = datetime(year, number, 1, tzinfo=profile.tz)
    nxt = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=profile.tz)
    return int(first.timestamp() * 1000), int(nxt.timestamp() * 1000)


def monthly(engine: Engine, registry: Registry, month: str, as_of_ms: int,
            line: str | None = None) -> list[dict[str, Any]]:
    """One row per line (or the one ``line``) for ``month``, from an engine fed with the
    records up to ``as_of``."""
    if line is not None and line not in registry.lines:
        raise StatsError(f"unknown line {line!r} (not in the registry)")
    engine.findings(as_of_ms)                       # processes every queued record
    rules = engine.pipeline.rules
    ops = next(r for r in rules if isinstance(r, Operations))
    table = next((r for r in rules if isinstance(r, Timetable)), None)
    rows: list[dict[str, Any]] = []
    for one in sorted(registry.lines.values(), key=lambda ln: ln.id):
        if line is not None and one.id != line:
            continue
        profile = engine.profiles.get(one.profile) or engine.default
        lo, hi = month_range(month, profile)
        tally = next((m for m in ops.month_lines()
                      if m.line.id == one.id and m.start_ms == lo), None)
        scheduled = run = None
        if one.timetable is not None and table is not None:
            scheduled, run = table.counts(one, lo, min(hi, as_of_ms) - 1)
        seat_km = tally.seat_km if tally is not None else 0.0
        pkm = tally.passenger_km if tally is not None else 0.0
        rows.append({
            "month": month, "line": one.id, "profile": profile.name,
            "trips": tally.trips if tally is not None else 0,
            "passengers": tally.passengers if tally is not None else 0,
            "passenger_km": round(pkm, 1), "seat_km": round(seat_km, 1),
            "index": round(pkm / seat_km, 3) if seat_km > 0 else None,
            "scheduled": scheduled, "run": run, "complete": hi <= as_of_ms,
        })
    return rows
