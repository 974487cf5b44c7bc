"""Local time for the pages: which time zone a vehicle's, a driver's or a line's day is in.

A vehicle's day is in the time zone of its home profile (registry ``vehicles[].profile``, read
by :func:`collector.localtime.home_profile`), else of the default profile (SP,
America/Sao_Paulo); a line's in its profile's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from collector.localtime import home_profile
from collector.registry import Registry
from collector.rules.profile import DEFAULT_PROFILE, Profile, local_midnight_ms

__all__ = ["DEFAULT_PROFILE", "FIRST_DAY", "LAST_DAY", "Day", "DayRangeError", "hhmm", "line_zone", "local", "profile_zone", "stamp",
           "today", "vehicle_zone"]


#: The days a page, the API or a bundle may name: a day's end must still be a ``date`` in every
#: zone (9999-12-31 + 1 day overflows) and no record predates 1970.
FIRST_DAY = date(1970, 1, 2)
LAST_DAY = date(9999, 12, 30)


class DayRangeError(ValueError):
    """A day outside :data:`FIRST_DAY` .. :data:`LAST_DAY` (bad input: HTTP 400)."""


@dataclass(frozen=True)
class Day:
    """A local calendar day: its first and last instant (ms, end exclusive) in a time zone."""

    day: date
    tz: ZoneInfo
    lo_ms: int
    hi_ms: int

    @classmethod
    def of(cls, day: date, tz: ZoneInfo) -> Day:
        """The day ``day`` in ``tz`` (23 or 25 hours long on a daylight-saving change);
        DayRangeError outside :data:`FIRST_DAY` .. :data:`LAST_DAY`."""
        if not FIRST_DAY <= day <= LAST_DAY:
            raise DayRangeError(f"day {day.isoformat()} is outside {FIRST_DAY.isoformat()} to "
                                f"{LAST_DAY.isoformat()}")
        return cls(day, tz, local_midnight_ms(day, tz), local_midnight_ms(day + timedelta(1), tz))

    def local(self, ms: int) -> datetime:
        """An instant as local time."""
        return local(ms, self.tz)


def local(ms: int, tz: ZoneInfo) -> datetime:
    """An instant (UTC ms) as a local datetime."""
    return datetime.fromtimestamp(ms / 1000, tz)


def hhmm(ms: int, tz: ZoneInfo) -> str:
    """``HH:MM`` local."""
    return local(ms, tz).strftime("%H:%M")


def stamp(ms: int, tz: ZoneInfo) -> str:
    """``DD/MM/AAAA HH:MM:SS`` local, as Brazilian pages write it."""
    return local(ms, tz).strftime("%d/%m/%Y %H:%M:%S")


def profile_zone(profiles: dict[str, Profile], name: str | None) -> ZoneInfo:
    """The time zone of a profile (the default profile's for an unknown name)."""
    found = profiles.get(name or DEFAULT_PROFILE) or profiles[DEFAULT_PROFILE]
    return found.tz


def line_zone(registry: Registry, profiles: dict[str, Profile], line_id: str | None) -> ZoneInfo:
    """The time zone of a line's profile."""
    line = registry.lines.get(line_id or "")
    return profile_zone(profiles, line.profile if line is not None else None)


def vehicle_zone(registry: Registry, profiles: dict[str, Profile], vehicle: str) -> ZoneInfo:
    """The time zone of a vehicle's days: its home profile's, else the default profile's."""
    return home_profile(vehicle, registry, profiles).tz


def today(tz: ZoneInfo, now_ms: int) -> date:
    """The local date at ``now``."""
    return local(now_ms, tz).date()
