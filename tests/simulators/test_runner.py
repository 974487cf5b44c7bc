"""The shared simulator machinery on a real pseudo-terminal: pacing, replies, noise, unplugging."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import serial

from simulators.clock import ManualClock, ScaledClock
from simulators.noise import Noise, NoiseConfig
from simulators.pty import PtyPort
from simulators.runner import Emission, Runner, SentLog, Station

pytestmark = pytest.mark.pty


class Ticker:
    """A toy device: 'TICK n' every device second, answers 'PING' lines with 'PONG'."""

    name = "ticker"

    def __init__(self, start_ms: int) -> None:
        self.next_ms = start_ms
        self.count = 0
        self.inbox = b""

    def next_due_ms(self) -> int | None:
        return self.next_ms

    def due(self, now_ms: int) -> list[Emission]:
        out = []
        while now_ms >= self.next_ms:
            self.count += 1
            out.append(Emission(f"TICK {self.count}\n".encode(), self.count))
            self.next_ms += 1000
        return out

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        self.inbox += data
        out = []
        while b"\n" in self.inbox:
            line, self.inbox = self.inbox.split(b"\n", 1)
            if line == b"PING":
                out.append(Emission(b"PONG\n", "pong"))
        return out


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Runner, Station, io.StringIO]]:
    clock = ScaledClock(1_700_000_000_000, scale=100)
    sent = io.StringIO()
    station = Station(
        Ticker(clock.now_ms()), PtyPort(tmp_path / "tty"), Noise(), SentLog(sent), None
    )
    runner = Runner([station], clock)
    runner.open()
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        yield runner, station, sent
    finally:
        runner.stopping = True
        thread.join(5)
        runner.close()


def test_ticks_reach_the_reader_and_requests_get_replies(
    running: tuple[Runner, Station, io.StringIO], tmp_path: Path
) -> None:
    _, _, sent = running
    with serial.Serial(str(tmp_path / "tty"), 115200, timeout=2) as port:
        port.reset_input_buffer()
        first = port.readline()
        assert first.startswith(b"TICK ")
        port.write(b"PING\n")
        lines = [port.readline() for _ in range(30)]
    assert b"PONG\n" in lines
    ticks = [int(line.split()[1]) for line in lines if line.startswith(b"TICK")]
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks)))
    logged = [json.loads(line) for line in sent.getvalue().splitlines()]
    assert all(entry["intact"] for entry in logged)


def test_unplug_is_a_hangup_and_replug_reopens_the_link(tmp_path: Path) -> None:
    clock = ScaledClock(1_700_000_000_000, scale=100)
    noise = Noise(NoiseConfig(unplug_every_s=2.0, unplug_for_s=20.0, seed=3))
    station = Station(Ticker(clock.now_ms()), PtyPort(tmp_path / "tty"), noise)
    runner = Runner([station], clock)
    runner.open()
    thread = threading.Thread(target=runner.run, daemon=True)
    # The reader opens the link before the runner starts: at 100x the first unplug may come
    # a few wall milliseconds after the start, before a reader opened after it could.
    port = serial.Serial(str(tmp_path / "tty"), 115200, timeout=1)
    thread.start()
    try:
        with port:
            hangup = False
            for _ in range(1000):  # at 100x a 2 s mean interval is a few wall ms away
                try:
                    port.read(100)
                except serial.SerialException:
                    hangup = True
                    break
        assert hangup
        for _ in range(200):  # the replug comes 20 device seconds (0.2 s real) later
            if station.port.opens >= 2:
                break
            time.sleep(0.02)
    finally:
        runner.stopping = True
        thread.join(5)
    assert station.port.opens >= 2
    assert os.readlink(tmp_path / "tty") == station.port.slave_path
    runner.close()
    assert not (tmp_path / "tty").exists()


def test_noise_garbage_fraction_and_intactness() -> None:
    noise = Noise(NoiseConfig(garbage=0.01, seed=1))
    chunk = bytes(range(50))
    total = garbage = 0
    for _ in range(20_000):
        wire, intact = noise.apply(chunk)
        assert intact
        assert wire.endswith(chunk)
        total += len(wire)
        garbage += len(wire) - len(chunk)
    assert 0.007 < garbage / total < 0.013
    flips = Noise(NoiseConfig(ber=0.01, seed=2))
    results = [flips.apply(chunk) for _ in range(1000)]
    assert any(not intact for _, intact in results)
    assert all((wire == chunk) == intact for wire, intact in results)


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(1000)
    assert clock.now_ms() == 1000
    assert clock.advance(500) == 1500
    assert clock.wall_seconds_until(10_000) == 0.0


def test_a_line_nobody_reads_drops_bytes_instead_of_blocking(tmp_path: Path) -> None:
    port = PtyPort(tmp_path / "tty", baud=0, stall_timeout_s=0.2)
    port.open()
    try:
        total = sum(port.write(bytes(1024)) for _ in range(300))
    finally:
        port.close()
    assert port.overrun_bytes > 0
    assert total + port.overrun_bytes == 300 * 1024
