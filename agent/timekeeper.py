"""The agent's best estimate of event time for records from devices without a clock.

docs/records.md and firmware-notes/agent.md: door counters' and the agent's own records get the
latest *live* device time (registrador or GPS, as the frame was sent — never a frame downloaded
from the registrador's memory) plus the monotonic time elapsed since that device time was
received. The Pi's wall clock
is used only before any device time has been seen, and the record then says so in its ``detail``
(or the caller marks it). Thread-safe: every source observes and reads it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agent import hostclock
from protocols.records import ms_to_ts, ts_to_ms


def _wall_ms() -> int:
    return hostclock.wall_ms()


class TimeKeeper:
    """Latest device time + monotonic time since it arrived; the host clock only as a fallback."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._mono = monotonic
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._device_ms: int | None = None
        self._at: float = 0.0
        self.source: str | None = None

    def observe(self, ts: str, source: str) -> None:
        """A device with a clock said it is ``ts`` now (called as its record arrives)."""
        try:
            ms = ts_to_ms(ts)
        except ValueError:
            return
        self.observe_ms(ms, source)

    def observe_ms(self, ms: int, source: str) -> None:
        """A device with a clock said it is ``ms`` now: only *live* times (a frame as it is
        sent), never the time of a frame downloaded from a device's memory."""
        with self._lock:
            self._device_ms = ms
            self._at = self._mono()
            self.source = source

    @property
    def synced(self) -> bool:
        """True once some device time has been seen."""
        with self._lock:
            return self._device_ms is not None

    def now_ms(self) -> tuple[int, bool]:
        """(estimated event time in ms, True if it comes from a device clock)."""
        with self._lock:
            if self._device_ms is None:
                return self._wall_ms(), False
            return self._device_ms + int((self._mono() - self._at) * 1000), True

    def now_ts(self) -> tuple[str, bool]:
        """(estimated event time as an RFC 3339 ts, True if it comes from a device clock)."""
        ms, synced = self.now_ms()
        return ms_to_ts(ms), synced
