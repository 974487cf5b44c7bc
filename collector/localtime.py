"""Local time for people: findings and records keep UTC in JSON; what a person reads or types is
in the local time of the profile that judges it (docs/rules.md, "Local time").

- A finding's zone is its profile's: the trip's line profile for trip findings, where the driver
  was for driver findings, else the vehicle's home profile (registry ``vehicles[].profile``),
  else the default profile (``--profile``, the collector's default).
- A date typed by a person (``--since 2026-03-02``) is that day's first instant in the zone of
  the vehicle it is about (its home profile, else the default); a time carries its offset or
  ``Z`` (RFC 3339) and is absolute.
- A finding computed under a profile whose text does not apply at that date (BA's decree was
  revoked in 2001) carries the caveat wherever it is printed for a person.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from collector.registry import Registry
from collector.rules.profile import DEFAULT_PROFILE, Profile
from protocols.records import RecordError, ts_to_ms

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}\Z")
#: what a person may type
EXAMPLES = "an RFC 3339 timestamp (e.g. 2026-03-02T14:10:00Z) nor a date (2026-03-02, local)"


class LocalTimeError(ValueError):
    """A time typed by a person that is neither a date nor an RFC 3339 time."""


def home_profile(vehicle: str | None, registry: Registry | None,
                 profiles: Mapping[str, Profile], default: str = DEFAULT_PROFILE) -> Profile:
    """The vehicle's home profile (registry ``vehicles[].profile``), else the default."""
    known = registry.vehicles.get(vehicle) if registry is not None and vehicle else None
    name = known.profile if known is not None and known.profile else default
    return profiles.get(name) or profiles[default]


def finding_profile(finding: Mapping[str, Any], registry: Registry | None,
                    profiles: Mapping[str, Profile], default: str = DEFAULT_PROFILE) -> Profile:
    """The profile whose zone a finding is read in (see the module docstring)."""
    named = profiles.get(str(finding.get("profile")))
    if named is not None:
        return named
    return home_profile(finding.get("vehicle"), registry, profiles, default)


def local_text(ts: str | None, tz: ZoneInfo) -> str:
    """``2026-03-02T11:30:00.000Z`` → ``2026-03-02 08:30:00 -03`` (None → ``open``)."""
    if ts is None:
        return "open"
    moment = datetime.fromtimestamp(ts_to_ms(ts) / 1000, tz)
    offset = moment.strftime("%z")
    short = offset[:3] if offset.endswith("00") else f"{offset[:3]}:{offset[3:]}"
    return f"{moment:%Y-%m-%d %H:%M:%S} {short}"


def person_time_ms(text: str, tz: ZoneInfo) -> int:
    """A time typed by a person → ms: a date is its first instant in ``tz`` (historical daylight
    saving time included); an RFC 3339 time is absolute."""
    value = text.strip()
    try:
        if _DATE.match(value):
            day = date.fromisoformat(value)
            return int(datetime(day.year, day.month, day.day, tzinfo=tz).timestamp() * 1000)
        return ts_to_ms(value)
    except (ValueError, RecordError):
        raise LocalTimeError(f"{text!r} is neither {EXAMPLES}") from None


def validity_caveat(finding: Mapping[str, Any], profile: Profile) -> str | None:
    """The caveat of a finding computed outside its profile's validity, for people."""
    details = finding.get("details") or {}
    if not details.get("outside_validity"):
        return None
    until = "" if profile.valid_until_ms is None else \
        f" until {datetime.fromtimestamp(profile.valid_until_ms / 1000, profile.tz):%d/%m/%Y}"
    since = datetime.fromtimestamp(profile.valid_from_ms / 1000, profile.tz)
    return (f"outside the validity of profile {profile.name} ({profile.title.split(' — ')[0]}: "
            f"from {since:%d/%m/%Y}{until})")


def finding_text(finding: Mapping[str, Any], profile: Profile) -> str:
    """One finding on one line for a person: severity, rule, who, local start → end, the
    figures, the first legal basis, and the validity caveat."""
    tz = profile.tz
    who = " ".join(str(finding[k]) for k in ("vehicle", "driver", "trip", "line")
                   if finding.get(k))
    details = finding.get("details") or {}
    figures = ", ".join(f"{k} {v}" for k, v in list(details.items())[:4]
                        if isinstance(v, int | float | str) and not isinstance(v, bool)
                        and len(str(v)) <= 30)
    text = (f"{finding.get('severity', ''):<10} {finding.get('rule', ''):<26} {who}  "
            f"{local_text(finding.get('start'), tz)} → {local_text(finding.get('end'), tz)} "
            f"({profile.timezone})")
    if figures:
        text += f"  ({figures})"
    basis = (finding.get("basis") or [""])[0]
    if basis:
        text += f"  [{basis}]"
    caveat = validity_caveat(finding, profile)
    if caveat:
        text += f"  — {caveat}"
    return text
