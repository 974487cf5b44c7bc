"""Watches the Pi's own clock: a step (NTP correcting a Pi that booted with no RTC, someone setting
the date) and a clock far from the devices' time are recorded as ``device`` records
(``device: agent``, ``status: clock_jump``). Record times never come from this clock anyway
(docs/records.md: device time, or the time keeper's estimate); this only tells the operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent import hostclock
from agent.durations import human_duration

#: A change of (wall − monotonic) larger than this is a step of the host clock (seconds).
STEP_S = 2.0
#: A host clock further than this from device time is reported once per run (seconds).
SKEW_S = 300.0


class ClockWatch:
    """Compares the host's wall clock with its monotonic clock and with device time."""

    def __init__(
        self,
        wall: Callable[[], float] = hostclock.wall,
        monotonic: Callable[[], float] = time.monotonic,
        step_s: float = STEP_S,
        skew_s: float = SKEW_S,
    ) -> None:
        self._wall = wall
        self._mono = monotonic
        self.step_s = step_s
        self.skew_s = skew_s
        self._offset = wall() - monotonic()
        self._skew_checked = False

    def check(self, device_ms: int | None) -> list[str]:
        """Details of the clock jumps seen since the last call (``device_ms``: device time now)."""
        out: list[str] = []
        wall = self._wall()
        offset = wall - self._mono()
        step = offset - self._offset
        self._offset = offset
        if abs(step) > self.step_s:
            out.append(f"host clock stepped {'+' if step >= 0 else ''}{human_duration(step)}")
        if device_ms is not None and not self._skew_checked:
            self._skew_checked = True
            skew = wall - device_ms / 1000.0
            if abs(skew) > self.skew_s:
                side = "ahead of" if skew > 0 else "behind"
                out.append(f"host clock {human_duration(abs(skew))} {side} device time")
        return out
