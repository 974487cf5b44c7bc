"""Device clocks for simulators: a scaled real-time clock and a manual one for scenario players.

A simulated device stamps its frames with *its own* clock (milliseconds since the Unix epoch,
UTC). With a time scale of 100, one wall second advances the device clock by 100 s, so an 8-hour
trip plays in under five minutes; the bytes on the wire still move at the real line rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class DeviceClock(Protocol):
    """What a device model and the runner need from a clock."""

    def now_ms(self) -> int:
        """The device's time now, in ms since the Unix epoch (UTC)."""
        ...

    def wall_seconds_until(self, device_ms: int) -> float:
        """Real seconds to wait until the device clock reads ``device_ms`` (0 if past)."""
        ...

    def set(self, device_ms: int) -> None:
        """Set the device clock (a clock-set by the operator, or a clock that boots in the past)."""
        ...


class ScaledClock:
    """A device clock running ``scale`` times faster than the host's monotonic clock."""

    def __init__(
        self,
        start_ms: int | None = None,
        scale: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if scale <= 0:
            raise ValueError(f"time scale must be > 0, not {scale}")
        # The host's wall clock only seeds the device clock; from then on it runs on its own.
        self.scale = float(scale)
        self._mono = monotonic
        self._t0 = monotonic()
        self._start_ms = int(time.time() * 1000) if start_ms is None else int(start_ms)

    @property
    def started_ms(self) -> int:
        """The device time the clock started from (or was last set to)."""
        return self._start_ms

    def now_ms(self) -> int:
        """The device's time now, in ms since the Unix epoch (UTC)."""
        return self._start_ms + int((self._mono() - self._t0) * 1000.0 * self.scale)

    def wall_seconds_until(self, device_ms: int) -> float:
        """Real seconds to wait until the device clock reads ``device_ms`` (0 if past)."""
        return max(0.0, (device_ms - self.now_ms()) / 1000.0 / self.scale)

    def set(self, device_ms: int) -> None:
        """Set the device clock; it keeps running at the same scale from the new value."""
        self._t0 = self._mono()
        self._start_ms = int(device_ms)


class ManualClock:
    """A clock that moves only when told to (scenario players, unit tests): never waits."""

    def __init__(self, start_ms: int) -> None:
        self._now = int(start_ms)

    def now_ms(self) -> int:
        """The device's time now, in ms since the Unix epoch (UTC)."""
        return self._now

    def wall_seconds_until(self, device_ms: int) -> float:
        """Always 0: a manual clock is advanced by its owner, not by waiting."""
        return 0.0

    def set(self, device_ms: int) -> None:
        """Set the clock to ``device_ms``."""
        self._now = int(device_ms)

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` and return the new time."""
        self._now += int(ms)
        return self._now
