"""Records of clockless devices (door counters, the agent's own) and the time keeper (issue 11
items 2 and 3): only *live* device times move the estimate of now, and door counts seen before
any device time are held until one arrives, never stamped by the Pi's clock
(firmware-notes/agent.md, "Clocks")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import DeviceConfig
from agent.sources import make_source
from agent.sources.base import SourceContext
from agent.sources.registrador import RegistradorSource
from agent.timekeeper import TimeKeeper
from protocols.records import Record, ms_to_ts, ts_to_ms, validate
from protocols.registrador.encoder import encode_history_record, encode_status
from tests.agent.devices import DoorSensor
from tests.agent.helpers import T0_MS, VEHICLE, wait_until

HOUR_MS = 3_600_000


class Sink:
    """Keeps what a source hands over."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.lock = threading.Lock()

    def __call__(self, source: str, records: list[Record]) -> None:
        with self.lock:
            self.records.extend(validate(r) for r in records)

    def doors(self) -> list[Record]:
        with self.lock:
            return [r for r in self.records if r["kind"] == "door"]


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def status(seq: int, clock_ms: int) -> bytes:
    return encode_status(seq, clock_ms, kmh=50.0, odometer_m=seq, ignition=True)


def test_history_frames_never_move_the_estimate_of_now(stop: threading.Event) -> None:
    # Live frame 5000 at T0 + 1 h; then frame 1400 (made at T0) downloaded by history. The
    # estimate stays at the live frame's time, never frame 1400's; the next live frame moves it.
    clock = TimeKeeper(monotonic=lambda: 100.0)  # no monotonic time passes in this test
    sink = Sink()
    cfg = DeviceConfig.model_validate({"name": "reg", "protocol": "registrador", "port": "loop://"})
    source = RegistradorSource(cfg, SourceContext(VEHICLE, sink, clock, stop))
    now = T0_MS + HOUR_MS
    source.deliver(source.decoder.feed(status(5000, now)))
    assert clock.now_ms() == (now, True)
    old = status(1400, T0_MS)
    source.deliver(source.decoder.feed(encode_history_record(1, now + 2000, old)))
    assert {r["ts"] for r in sink.records if r.get("device_seq") == 1400} == {ms_to_ts(T0_MS)}
    assert clock.now_ms() == (now, True)
    # A history record broken by noise whose frame inside survives is decoded like a live
    # frame (registrador.md §7): still an old frame, the estimate stays.
    broken = bytearray(encode_history_record(1, now + 3000, status(1401, T0_MS + 1000)))
    broken[5] ^= 0xFF  # the record's SEQ: its CRC fails, the frame inside is still whole
    source.deliver(source.decoder.feed(bytes(broken)))
    assert any(r.get("device_seq") == 1401 for r in sink.records)
    assert clock.now_ms() == (now, True)
    source.deliver(source.decoder.feed(status(5001, now + 1000)))  # the next live frame
    assert clock.now_ms() == (now + 1000, True)


@pytest.mark.pty
def test_door_counts_before_any_device_time_are_held_then_placed(
    tmp_path: Path, stop: threading.Event
) -> None:
    # tests/agent/devices.py's sensor: poll 1 the baseline, polls 2 and 3 count 2 in and 1 out
    # each with the door open, poll 4 closes it: 4 boarded, 2 alighted, all before any device
    # time. None of it may be stamped by the Pi's clock; it goes out at the first device time.
    sensor = DoorSensor(tmp_path / "apc")
    sink = Sink()
    clock = TimeKeeper()
    cfg = DeviceConfig.model_validate({
        "name": "doors", "protocol": "apc", "port": sensor.port.path, "baudrate": 19200,
        "poll_interval_s": 0.05, "reply_timeout_s": 0.2, "silent_after_s": 5,
        "counters": [{"address": 1, "door": 1}],
    })
    source = make_source(cfg, VEHICLE, sink, clock, stop)
    source.start()
    try:
        assert wait_until(lambda: sensor.polls >= 8)  # the stop is over, the door closed
        assert sink.doors() == []  # held: no device time yet
        clock.observe(ms_to_ts(T0_MS), "reg")  # a registrador speaks: T0
        assert wait_until(lambda: sink.doors() != [])
    finally:
        stop.set()
        source.join(5)
        sensor.close()
    doors = sink.doors()
    assert sum(r["boarded"] for r in doors) == 4
    assert sum(r["alighted"] for r in doors) == 2
    for rec in doors:  # placed at the first device time (plus the little monotonic time since)
        assert 0 <= ts_to_ms(rec["ts"]) - T0_MS < 30_000
