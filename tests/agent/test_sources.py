"""Sources on real pseudo-terminals: reading, a device unplugged and plugged back, silence, polling."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.config import DeviceConfig
from agent.sources import Source, make_source
from agent.timekeeper import TimeKeeper
from protocols.records import Record, ms_to_ts, ts_to_ms, validate
from tests.agent.devices import DoorSensor, Registrador
from tests.agent.helpers import T0_MS, VEHICLE, wait_until

pytestmark = pytest.mark.pty


class Collected:
    """A sink that keeps (source, record) pairs."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Record]] = []
        self.lock = threading.Lock()

    def __call__(self, source: str, records: list[Record]) -> None:
        with self.lock:
            self.items.extend((source, validate(r)) for r in records)

    def statuses(self, device: str) -> list[str]:
        """The health statuses reported for ``device``, in order."""
        with self.lock:
            return [r["status"] for _, r in self.items if r["kind"] == "device" and r["device"] == device]

    def of(self, kind: str) -> list[Record]:
        """Records of one kind."""
        with self.lock:
            return [r for _, r in self.items if r["kind"] == kind]


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """The agent's stop event, set after the test."""
    event = threading.Event()
    yield event
    event.set()


def device(name: str, protocol: str, port: str, **extra: Any) -> DeviceConfig:
    """A device with quick reopen and silence timings for tests."""
    return DeviceConfig.model_validate(
        {
            "name": name,
            "protocol": protocol,
            "port": port,
            "silent_after_s": 0.5,
            "reopen_min_s": 0.05,
            "reopen_max_s": 0.2,
            **extra,
        }
    )


def test_registrador_unplugged_and_plugged_back(tmp_path: Path, stop: threading.Event) -> None:
    talker = Registrador(tmp_path / "reg")
    port = talker.port
    sink = Collected()
    clock = TimeKeeper()
    source: Source = make_source(device("reg", "registrador", port.path), VEHICLE, sink, clock, stop)
    source.start()
    try:
        assert wait_until(lambda: len(sink.of("speed")) >= 5)
        assert clock.synced
        port.unplug()
        assert wait_until(lambda: "disconnected" in sink.statuses("registrador"))
        before = len(sink.of("speed"))
        port.open()
        assert wait_until(lambda: sink.statuses("registrador")[-1:] == ["ok"])
        assert wait_until(lambda: len(sink.of("speed")) >= before + 5)
        talker.talking.clear()  # the device falls silent
        assert wait_until(lambda: sink.statuses("registrador")[-1:] == ["silent"])
        talker.talking.set()
        assert wait_until(lambda: sink.statuses("registrador")[-1:] == ["ok"])
    finally:
        stop.set()
        source.join(5)
        talker.close()
    statuses = sink.statuses("registrador")
    assert statuses == ["disconnected", "ok", "silent", "ok"]
    seqs = [r["device_seq"] for r in sink.of("speed")]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    # Agent records about the registrador carry the time keeper's (device-derived) time.
    device_recs = [r for r in sink.of("device") if r["device"] == "registrador"]
    assert all("host clock" not in r.get("detail", "") for r in device_recs)


def test_a_missing_device_does_not_stop_another(tmp_path: Path, stop: threading.Event) -> None:
    talker = Registrador(tmp_path / "reg")
    port = talker.port
    sink = Collected()
    clock = TimeKeeper()
    missing = make_source(
        device("gps", "nmea", str(tmp_path / "no-such-tty")), VEHICLE, sink, clock, stop
    )
    reg = make_source(device("reg", "registrador", port.path), VEHICLE, sink, clock, stop)
    attempts: list[float] = []
    open_port = missing.open

    def counted_open() -> Any:
        attempts.append(time.monotonic())
        return open_port()

    missing.open = counted_open  # type: ignore[method-assign]
    missing.start()
    reg.start()
    try:
        assert wait_until(lambda: len(sink.of("speed")) >= 10)
        assert wait_until(lambda: len(attempts) >= 3)  # the missing line is tried again …
        assert sink.statuses("gps") == ["disconnected"]  # … and reported once
        assert reg.health == "ok"
    finally:
        stop.set()
        missing.join(5)
        reg.join(5)
        talker.close()
    gps = [r for r in sink.of("device") if r["device"] == "gps"]
    assert "no-such-tty" in gps[0]["detail"]


def test_apc_is_polled_and_stamped_with_device_time(tmp_path: Path, stop: threading.Event) -> None:
    sensor = DoorSensor(tmp_path / "apc")
    port = sensor.port
    sink = Collected()
    clock = TimeKeeper()
    clock.observe(ms_to_ts(T0_MS), "reg")  # a registrador spoke: T0
    cfg = device(
        "doors", "apc", port.path, poll_interval_s=0.05, reply_timeout_s=0.2,
        counters=[{"address": 1, "door": 7}],
    )
    source = make_source(cfg, VEHICLE, sink, clock, stop)
    source.start()
    try:
        assert wait_until(lambda: any(not r["open"] for r in sink.of("door")))
    finally:
        stop.set()
        source.join(5)
        sensor.close()
    doors = sink.of("door")
    assert [(r["door"], r["open"]) for r in doors[:2]] == [(7, True), (7, False)]
    # Poll 1 is the baseline; polls 2 and 3 each count 2 in, 1 out: 4 boarded, 2 alighted.
    assert sum(r["boarded"] for r in doors[:2]) == 4
    assert sum(r["alighted"] for r in doors[:2]) == 2
    # Stamped with the time keeper: T0 plus a little monotonic time, not the host clock.
    for rec in doors:
        assert 0 <= ts_to_ms(rec["ts"]) - T0_MS < 30_000


class DoorSensorPulledOpen(DoorSensor):
    """A DoorSensor whose cable comes out after poll 3, with its door open and 4 in, 2 out
    counted (polls 2 and 3) — counts the agent has read but no `door` record holds yet."""

    unanswered = 0

    def tick(self) -> None:
        """Answer polls 1–3 only."""
        if self.polls < 3:
            super().tick()
        elif self.port.read():
            self.unanswered += 1  # a poll after the third: the agent has read answer 3


def test_doors_open_when_the_line_goes_and_the_agent_stops_are_reported(
    tmp_path: Path, stop: threading.Event
) -> None:
    sensor = DoorSensorPulledOpen(tmp_path / "apc")
    sink = Collected()
    cfg = device(
        "doors", "apc", sensor.port.path, poll_interval_s=0.05, reply_timeout_s=0.2,
        counters=[{"address": 1, "door": 7}],
    )
    clock = TimeKeeper()
    clock.observe(ms_to_ts(T0_MS), "reg")  # door records wait for a device time
    source = make_source(cfg, VEHICLE, sink, clock, stop)
    source.start()
    try:
        assert wait_until(lambda: sensor.unanswered >= 1)
        sensor.close()  # the line goes away: the source is reopening it, not polling
        assert wait_until(lambda: "disconnected" in sink.statuses("apc"))
    finally:
        stop.set()
        source.join(5)
    doors = sink.of("door")
    # Poll 1 is the baseline; polls 2 and 3 count 2 in, 1 out each: all 4 and 2 are in records.
    assert sum(r["boarded"] for r in doors) == 4
    assert sum(r["alighted"] for r in doors) == 2
    assert doors[-1]["open"] is True
