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

from frota import harness
from tests.agent.helpers import VEHICLE
from tests.agent.process import AgentProcess, write_agent_config
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty, pytest.mark.slow]


START = "2026-03-02T14:00:00Z"


class Simulator(harness.SimulatorProcess):
    """``frota sim DEVICE`` as a real process (the harness's) on a pty reachable at ``link``,
    logging what it sent; started at once."""

    def __init__(self, folder: Path, device: str, *args: str) -> None:
        self.sent = folder / f"{device}.sent.jsonl"
        super().__init__(device, folder / device, "--sent-log", str(self.sent), "--start", START,
                         "--time-scale", "20", *args)
        self.start()

    def frames(self) -> list[int]:
        """Frame numbers sent live (history answers have string labels)."""
        entries = (json.loads(line) for line in self.sent.read_text().splitlines())
        return [e["label"] for e in entries if isinstance(e["label"], int)]


@dataclass
class Bus:
    """The simulated devices, the agent and the collector of one test."""

    registrador: Simulator
    devices: list[Simulator]
    agent: AgentProcess
    collector: CollectorProcess


@pytest.fixture
def bus(tmp_path: Path, mosquitto: Mosquitto) -> Iterator[Bus]:
    """Simulators talking, a collector running, an agent running."""
    reg = Simulator(tmp_path, "registrador", "--baud", "0")
    gps = Simulator(tmp_path, "gps", "--baud", "0")
    apc = Simulator(tmp_path, "apc", "--baud", "0", "--stop-every", "20", "--dwell", "6")
    sims = [reg, gps, apc]
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    collector.start()  # while the simulators start
    for sim in sims:
        sim.wait_ready()
    conf = write_agent_config(
        tmp_path / "agent", mosquitto.url,
        registrador=str(reg.link), gps=str(gps.link), apc=str(apc.link),
    )
    agent = AgentProcess(conf)
    agent.start()
    out = Bus(reg, sims, agent, collector)
    try:
        yield out
    finally:
        agent.stop()
        collector.stop()
        for sim in sims:
            sim.stop()


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
    """Every committed record is in the collector once, with its ts, agent and seq; none pending;
    every frame the registrador sent (live, or downloaded by history) is there."""
    assert bus.agent.stop() == 0, bus.agent.log.read_text()
    committed = bus.agent.query("SELECT seq, body, s.state FROM record_bodies JOIN record_states s USING (seq) ORDER BY seq")
    assert committed, "the agent committed nothing"
    assert [row[2] for row in committed if row[2] != 1] == []  # backlog zero, nothing rejected
    bodies = [json.loads(str(body)) for _, body, _ in committed]
    assert [b["seq"] for b in bodies] == list(range(1, len(bodies) + 1))  # no gaps
    stored = collector_rows(bus.collector.db)
    assert [(a, s, t) for a, s, t, _, _ in stored] == [(b["agent"], b["seq"], b["ts"]) for b in bodies]
    frames = {d for _, _, _, _, d in stored if d is not None}
    sent = bus.registrador.frames()
    # Frames sent after the agent stopped reading are not expected; all before are.
    expected = [seq for seq in sent if seq <= max(frames)]
    assert len(expected) > 40
    assert sorted(set(expected) - frames) == []
    kinds = {b["kind"] for b in bodies}
    assert {"speed", "position", "door"} <= kinds, kinds


def run_for(seconds: float, during: Callable[[], None] | None = None) -> None:
    """Let the bus run (calling ``during`` half-way)."""
    time.sleep(seconds / 2)
    if during is not None:
        during()
    time.sleep(seconds / 2)


def test_every_record_arrives_once(bus: Bus) -> None:
    bus.agent.wait("kind = 'door'", 1)
    run_for(1.0)
    bus.agent.wait_backlog_zero()
    check_exactly_once(bus)


def test_every_record_arrives_once_across_a_broker_restart(bus: Bus, mosquitto: Mosquitto) -> None:
    bus.agent.wait("kind = 'speed'", 20)

    def outage() -> None:
        mosquitto.stop()
        time.sleep(2.0)  # the bus keeps producing; the agent keeps capturing
        mosquitto.start()

    run_for(3.0, outage)
    bus.agent.wait_backlog_zero(timeout=45)
    check_exactly_once(bus)


def test_every_record_arrives_once_across_a_collector_restart(bus: Bus) -> None:
    bus.agent.wait("kind = 'speed'", 20)

    def restart() -> None:
        assert bus.collector.stop() == 0
        time.sleep(2.0)
        bus.collector.start()

    run_for(3.0, restart)
    bus.agent.wait_backlog_zero(timeout=45)
    check_exactly_once(bus)
