"""Time helpers for the engine: a fast RFC 3339 → ms parser and local-time night intervals."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from protocols.records import RecordError, ts_to_ms

_MINUTES: dict[str, int] = {}
_last_ts = ""
_last_ms = 0


def fast_ts_ms(ts: str) -> int:
    """RFC 3339 → ms since the epoch; the canonical ``YYYY-MM-DDTHH:MM:SS.mmmZ`` form is cached.

    Hand-rolled because ``datetime.fromisoformat`` per record is a large share of the cost of
    checking a week of 1 Hz records (a fleet's records share each second's timestamp); other
    forms go through ``protocols.records.ts_to_ms``.
    """
    global _last_ts, _last_ms
    if ts == _last_ts:
        return _last_ms
    if len(ts) == 24 and ts[23] == "Z" and ts[19] == "." and ts[16] == ":":
        base = _MINUTES.get(ts[:16])
        if base is None:
            base = ts_to_ms(ts[:16] + ":00.000Z")
            if len(_MINUTES) > 200_000:
                _MINUTES.clear()
            _MINUTES[ts[:16]] = base
        sec = ts[17:19]
        frac = ts[20:23]
        if not (sec.isdigit() and frac.isdigit() and sec < "61"):
            raise RecordError(f"ts: {ts!r} is not an RFC 3339 timestamp")
        ms = base + int(sec) * 1000 + int(frac)
    else:
        ms = ts_to_ms(ts)
    _last_ts, _last_ms = ts, ms
    return ms


def _local_ms(tz: ZoneInfo, day: datetime, minute_of_day: int) -> int:
    wall = datetime(day.year, day.month, day.day, minute_of_day // 60, minute_of_day % 60,
                    tzinfo=tz)
    return int(wall.timestamp() * 1000)


def parse_hhmm(text: str) -> int:
    """'18:00' → minutes after midnight."""
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def night_overlap_ms(a: int, b: int, tz: ZoneInfo, start_min: int, end_min: int) -> int:
    """How much of [a, b) falls in the local night from ``start_min`` to ``end_min`` (next day)."""
    if b <= a:
        return 0
    first = datetime.fromtimestamp(a / 1000, tz).replace(tzinfo=None) - timedelta(days=1)
    last = datetime.fromtimestamp(b / 1000, tz).replace(tzinfo=None)
    total = 0
    day = first
    while day.date() <= last.date():
        night_from = _local_ms(tz, day, start_min)
        next_day = day + timedelta(days=1)
        night_to = _local_ms(tz, next_day, end_min) if end_min <= start_min \
            else _local_ms(tz, day, end_min)
        lo, hi = max(a, night_from), min(b, night_to)
        if hi > lo:
            total += hi - lo
        day = next_day
    return total
