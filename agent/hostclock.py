"""The host's wall clock, as the agent reads it: the one place the agent asks the Pi what time it is.

Record times never come from here (device time, or the time keeper's estimate); the agent uses
it for diagnostics (when a record was captured or acknowledged), for its own records before any
device time is seen (and says so), and to watch the clock for jumps (``agent/clockwatch.py``).

For tests only: ``FROTA_AGENT_CLOCK_OFFSET_FILE`` names a file holding a number of seconds added
to the real clock, read at every call — writing a new number steps the agent's view of the host
clock as an NTP step or a boot with a clock in the past would, without touching the system clock.
"""

from __future__ import annotations

import os
import time

from protocols.records import now_ms

#: The environment variable naming the offset file (tests only).
OFFSET_ENV = "FROTA_AGENT_CLOCK_OFFSET_FILE"


def _offset() -> float:
    path = os.environ.get(OFFSET_ENV)
    if not path:
        return 0.0
    try:
        with open(path, encoding="ascii") as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def wall() -> float:
    """Seconds since the epoch by the host clock (plus the test offset, if any)."""
    return time.time() + _offset()


def wall_ms() -> int:
    """The host clock in ms since the epoch (``protocols.records.now_ms`` plus the test offset)."""
    offset = _offset()
    return now_ms() + (round(offset * 1000) if offset else 0)
