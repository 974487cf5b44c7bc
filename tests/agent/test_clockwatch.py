"""The host clock watch: steps of the Pi's clock and a Pi clock far from device time (pure logic)."""

from __future__ import annotations

from agent.clockwatch import ClockWatch


class Clocks:
    """Hand-driven wall and monotonic clocks."""

    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def tick(self, seconds: float) -> None:
        """Both clocks advance together."""
        self.wall += seconds
        self.mono += seconds


def test_a_step_of_the_host_clock_is_reported_once() -> None:
    c = Clocks()
    watch = ClockWatch(wall=lambda: c.wall, monotonic=lambda: c.mono)
    c.tick(1.0)
    assert watch.check(None) == []
    c.wall += 0.5  # NTP slewing: below the threshold
    assert watch.check(None) == []
    c.wall -= 3600.0  # stepped back an hour
    c.tick(1.0)
    assert watch.check(None) == ["host clock stepped -60 min"]
    c.tick(1.0)
    assert watch.check(None) == []


def test_a_host_clock_far_from_device_time_is_reported_once() -> None:
    c = Clocks()
    watch = ClockWatch(wall=lambda: c.wall, monotonic=lambda: c.mono)
    device_ms = int((c.wall + 86_400) * 1000)  # the Pi booted a day in the past
    assert watch.check(device_ms) == ["host clock 24.0 h behind device time"]
    assert watch.check(device_ms) == []


def test_a_host_clock_close_to_device_time_says_nothing() -> None:
    c = Clocks()
    watch = ClockWatch(wall=lambda: c.wall, monotonic=lambda: c.mono)
    assert watch.check(int((c.wall - 2.0) * 1000)) == []
