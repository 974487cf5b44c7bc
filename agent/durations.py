"""Durations as people read them: ``45 s``, ``12 min``, ``5.2 h``, ``274 d 2 h`` — never 23681280 s.

For messages and status lines only; records and JSON keep seconds (``*_s`` keys).
"""

from __future__ import annotations

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0


def human_duration(seconds: float) -> str:
    """A duration in the largest unit that keeps it readable (sign kept, rounded to what is shown)."""
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 2 * MINUTE:
        text = f"{s:.0f} s" if s >= 10 or s == int(s) else f"{s:.1f} s"
    elif s < 2 * HOUR:
        text = f"{s / MINUTE:.0f} min"
    elif s < 2 * DAY:
        text = f"{s / HOUR:.1f} h"
    else:
        days, hours = divmod(round(s / HOUR), 24)  # to the nearest hour
        text = f"{days} d" + (f" {hours} h" if hours else "")
    return sign + text
