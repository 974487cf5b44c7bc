"""The tachograph's clock on the bus: TD (time/date, PGN 65254) → milliseconds, and frame dating.

TD layout (firmware-notes/fms.md §4, checked against a second public source): seconds byte 0
(0.25 s/bit), minutes byte 1, hours byte 2, month byte 3, day byte 4 (0.25 day/bit: the day
is the code divided by 4, the remainder the quarter of the day, 0 = 00:00-06:00 … 3 =
18:00-24:00, which repeats the hours and is not used), year byte 5 (+1985), local minute
offset byte 6 (−125), local hour offset byte 7 (−125). Bytes 0-5 are UTC; the offsets say
how to get local time and are not needed for a UTC record.

Dating (§6): a frame is dated by the latest TD plus the receive time elapsed since that TD was
received (``CanFrame.timestamp``; without receive times, by the latest TD itself).
"""

from __future__ import annotations

import calendar
import time
from typing import Final

#: Largest receive-time gap over which a TD is carried forward before it is considered moved.
JUMP_TOLERANCE_MS: Final = 2_000
#: A TD this close after the previous one advanced normally (TD comes about every second).
NORMAL_TD_GAP_MS: Final = 5_000


def td_ms(signals: dict[str, int]) -> int | None:
    """Milliseconds since the Unix epoch (UTC) from TD's raw codes; None if any field is
    not available or out of range (e.g. day 0, month 13, 31 February)."""
    quarter_seconds = signals["Seconds"]
    minutes = signals["Minutes"]
    hours = signals["Hours"]
    month = signals["Month"]
    day = signals["Day"] // 4
    year = signals["Year"] + 1985
    if quarter_seconds > 239 or minutes > 59 or hours > 23 or not 1 <= month <= 12:
        return None
    if signals["Year"] > 250 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    days = calendar.timegm((year, month, day, 0, 0, 0, 0, 0, 0)) // 86_400
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + quarter_seconds * 250


def td_codes(ms: int, *, local_offset_min: int = 0) -> dict[str, int]:
    """TD's raw codes for a UTC time in ms (rounded down to 0.25 s) and a local offset."""
    seconds, millis = divmod(ms, 1000)
    year, month, day, hours, minutes, secs = _utc(seconds)
    if not 1985 <= year <= 2235:
        raise ValueError(f"year {year} is outside TD's 1985-2235")
    hour_off, minute_off = divmod(abs(local_offset_min), 60)
    sign = -1 if local_offset_min < 0 else 1
    return {
        "Seconds": secs * 4 + millis // 250,
        "Minutes": minutes,
        "Hours": hours,
        "Month": month,
        "Day": day * 4 + hours // 6,
        "Year": year - 1985,
        "LocalMinuteOffset": sign * minute_off + 125,
        "LocalHourOffset": sign * hour_off + 125,
    }


def _utc(seconds: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(seconds)
    return t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec


class TachographClock:
    """The latest TD and when it was received; dates frames from it."""

    def __init__(self) -> None:
        self.anchor_ms: int | None = None
        self.anchor_rx: float | None = None
        self.receive_steps = 0
        """TDs that showed the receive clock, not the tachograph's, had stepped."""

    def date(self, rx: float | None, *, held: bool = False) -> int | None:
        """Device time of a frame received at ``rx`` (None: no TD yet).

        A frame ``held`` until the first TD is dated backwards by receive time; any other
        never before the latest TD (a receive clock set back is not the tachograph's)."""
        anchor = self.anchor_ms
        if anchor is None:
            return None
        if rx is None or self.anchor_rx is None:
            return anchor
        ms = anchor + round((rx - self.anchor_rx) * 1000)
        return max(0, ms) if held else max(anchor, ms)

    def set(self, ms: int, rx: float | None) -> int | None:
        """A TD received at ``rx``; returns how far (ms) the tachograph's clock moved from the
        time carried forward, when that is more than ``JUMP_TOLERANCE_MS`` (else None).

        When the TD advanced by no more than ``NORMAL_TD_GAP_MS`` since the previous one, a
        mismatch is the receive clock's step (the Pi's clock set by NTP under candump or
        python-can), not the tachograph's: counted in ``receive_steps``, no jump returned."""
        moved = None
        if self.anchor_ms is not None and rx is not None and self.anchor_rx is not None:
            expected = self.anchor_ms + round((rx - self.anchor_rx) * 1000)
            if abs(ms - expected) > JUMP_TOLERANCE_MS:
                if 0 <= ms - self.anchor_ms <= NORMAL_TD_GAP_MS:
                    self.receive_steps += 1
                else:
                    moved = ms - expected
        self.anchor_ms = ms
        self.anchor_rx = rx
        return moved
