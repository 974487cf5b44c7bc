"""Time helpers for the engine: local-time night intervals (record times: protocols.records)."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo


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
