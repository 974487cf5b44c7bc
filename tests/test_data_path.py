"""The data path end to end: devices on ptys → ``frota agent run`` → Mosquitto → ``frota collector
run`` → SQLite. Every record the agent committed is in the collector's database exactly once, with
its original ts, agent and seq, and the agent's backlog ends at zero — also across a broker restart
and a collector restart in the middle of the run. Real processes, real ptys, a private broker.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent.devices import DoorSensor, Gps, Registrador
from tests.agent.helpers import VEHICLE
from tests.agent.process import AgentProcess, write_agent_config
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty, pytest.mark.slow]


@dataclass
class Bus:
    """The devices, the agent and the collector of one test."""

    registrador: Registrador
    gps: Gps
    doors: DoorSensor
    agent: AgentProcess
    collector: CollectorProcess

    def quiet(self) -> None:
        """The devices stop talking (the bus is parked)."""
        for dev in (self.registrador, self.gps):
            dev.talking.clear()


@pytest.fixture
def bus(tmp_path: Path, mosquitto: Mosquitto) -> Iterator[Bus]:
    """Devices talking, a collector running, an agent running."""
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    collector.start()
    reg = Registrador(tmp_path / "registrador")
    gps = Gps(tmp_path / "gps")
    doors = DoorSensor(tmp_path / "doors")
    conf = write_agent_config(
        tmp_path / "agent", mosquitto.url, registrador=reg.path, gps=gps.path, apc=doors.path
    )
    agent = AgentProcess(conf)
    for dev in (reg, gps):
        dev.talking.clear()  # the devices start talking once the agent listens
    agent.start()
    agent.wait_open(reg.port.slave_path, gps.port.slave_path, doors.port.slave_path)
    for dev in (reg, gps):
        dev.talking.set()
    out = Bus(reg, gps, doors, agent, collector)
    try:
        yield out
    finally:
        agent.stop()
        collector.stop()
        for device in (reg, gps, doors):
            device.close()


def collector_rows(db: Path) -> list[tuple[str, int, str, str, int | None]]:
    """(agent, seq, ts, kind, device_seq) of every record the collector stored for the vehicle."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT agent, seq, ts, kind, device_seq FROM records WHERE vehicle = ? ORDER BY seq",
            (VEHICLE,),
        ).fetchall()
    finally:
        conn.close()
    return [(str(a), int(s), str(t), str(k), None if d is None else int(d)) for a, s, t, k, d in rows]


def check_exactly_once(bus: Bus) -> None:
    """Every committed record is in the collector once, with its ts, agent and seq; none pending."""
    assert bus.agent.stop() == 0, bus.agent.log.read_text()
    committed = bus.agent.query("SELECT seq, body, state FROM records ORDER BY seq")
    assert committed, "the agent committed nothing"
    assert [row[2] for row in committed if row[2] != 1] == []  # backlog zero, nothing rejected
    bodies = [json.loads(str(body)) for _, body, _ in committed]
    assert [b["seq"] for b in bodies] == list(range(1, len(bodies) + 1))  # no gaps
    stored = collector_rows(bus.collector.db)
    assert [(a, s, t) for a, s, t, _, _ in stored] == [(b["agent"], b["seq"], b["ts"]) for b in bodies]
    # Every frame the registrador sent is there once, and the door sensor's counts add up.
    frames = [d for _, _, _, kind, d in stored if kind == "speed" and d is not None]
    assert sorted(frames) == bus.registrador.sent
    doors = [b for b in bodies if b["kind"] == "door"]
    assert sum(b["boarded"] for b in doors) == 4
    assert sum(b["alighted"] for b in doors) == 2
    assert any(b["kind"] == "position" for b in bodies)


def run_for(seconds: float, during: Callable[[], None] | None = None) -> None:
    """Let the bus run (calling ``during`` half-way)."""
    time.sleep(seconds / 2)
    if during is not None:
        during()
    time.sleep(seconds / 2)


def test_every_record_arrives_once(bus: Bus) -> None:
    bus.agent.wait("kind = 'speed'", 50)
    run_for(2.0)
    bus.quiet()
    bus.agent.wait_backlog_zero()
    check_exactly_once(bus)


def test_every_record_arrives_once_across_a_broker_restart(bus: Bus, mosquitto: Mosquitto) -> None:
    bus.agent.wait("kind = 'speed'", 50)

    def outage() -> None:
        mosquitto.stop()
        time.sleep(2.0)  # the bus keeps producing; the agent keeps capturing
        mosquitto.start()

    run_for(3.0, outage)
    bus.quiet()
    bus.agent.wait_backlog_zero(timeout=45)
    check_exactly_once(bus)


def test_every_record_arrives_once_across_a_collector_restart(bus: Bus) -> None:
    bus.agent.wait("kind = 'speed'", 50)

    def restart() -> None:
        assert bus.collector.stop() == 0
        time.sleep(2.0)
        bus.collector.start()

    run_for(3.0, restart)
    bus.quiet()
    bus.agent.wait_backlog_zero(timeout=45)
    check_exactly_once(bus)
