"""A door-counter line that disappears is a `disconnected` device, as the registrador and the GPS
are: no traceback, no "unexpected error" (issue 14 item 3). Real pseudo-terminals, unplugged."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from agent.sources import make_source
from agent.timekeeper import TimeKeeper
from tests.agent.devices import DoorSensor
from tests.agent.helpers import VEHICLE, wait_until
from tests.agent.test_sources import Collected, device

pytestmark = pytest.mark.pty


class PullWhileWaiting(threading.Event):
    """The agent's stop event; once armed, its next wait (the source between two poll rounds,
    an answer read whole) first pulls the sensor's cable: the next round starts on a dead tty."""

    def __init__(self, sensor: DoorSensor) -> None:
        super().__init__()
        self.sensor = sensor
        self.armed = threading.Event()
        self.pulled = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if self.armed.is_set() and not self.pulled.is_set():
            with self.sensor.lock:
                self.sensor.port.unplug()
            self.pulled.set()
        return super().wait(timeout)


def test_unplugged_door_line_is_disconnected_then_ok_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sensor = DoorSensor(tmp_path / "apc")
    stop = PullWhileWaiting(sensor)
    sink = Collected()
    cfg = device(
        "doors", "apc", sensor.port.path, poll_interval_s=0.05, reply_timeout_s=0.2,
        counters=[{"address": 1, "door": 7}],
    )
    source = make_source(cfg, VEHICLE, sink, TimeKeeper(), stop)
    source.start()
    try:
        assert wait_until(lambda: sensor.polls >= 3)
        assert source.health == "ok"
        # Pulled between two rounds: the next request starts by flushing the tty's input, which
        # fails with EIO (termios.error, not an OSError) on a hung-up tty.
        stop.armed.set()
        assert wait_until(lambda: "disconnected" in sink.statuses("apc"))
        polls = sensor.polls
        with sensor.lock:
            sensor.port.open()  # plugged back: the same link, a new tty
        assert wait_until(lambda: sink.statuses("apc")[-1:] == ["ok"])
        assert wait_until(lambda: sensor.polls > polls)
    finally:
        stop.set()
        source.join(5)
        sensor.close()
    assert sink.statuses("apc") == ["disconnected", "ok"]
    detail = next(
        r["detail"] for r in sink.of("device") if r["device"] == "apc" and r["status"] == "disconnected"
    )
    assert sensor.port.path in detail
    assert "Input/output error" in detail
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert "unexpected error" not in caplog.text
