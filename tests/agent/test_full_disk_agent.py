"""The whole agent on a full buffer (``buffer.max_size_mb``, SQLite's own cap): real processes.

The network is down, so nothing can be evicted: the buffer fills, batches are dropped and the
agent owes a ``buffer_full`` record. Then the broker and the collector come: uploaded records
are evicted to make room, ``buffer_full`` is written, and the registrador's dropped frames come
back by catch-up from its own memory — every frame it made reaches the collector exactly once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from tests.agent.process import AgentProcess, write_agent_config
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto
from tests.test_data_path import Simulator, collector_rows

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty, pytest.mark.slow]


def wait_log(agent: AgentProcess, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in agent.log.read_text():
        assert agent.proc is not None
        assert agent.proc.poll() is None, agent.log.read_text()
        assert time.monotonic() < deadline, f"never logged {text!r}: {agent.log.read_text()[-2000:]}"
        time.sleep(0.1)


def collector_frames(db: Path) -> set[int]:
    if not db.exists():
        return set()
    conn = sqlite3.connect(db)
    try:
        return {int(d) for (d,) in conn.execute(
            "SELECT DISTINCT device_seq FROM records WHERE device_seq IS NOT NULL")}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


def test_full_buffer_drops_then_catches_up_once_there_is_room(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    mosquitto.stop()  # no network: nothing is uploaded, so nothing can be evicted
    # 100 frames a second (the later --time-scale wins): the buffer fills in seconds.
    reg = Simulator(tmp_path, "registrador", "--baud", "0", "--time-scale", "100")
    reg.wait_ready()
    agent = AgentProcess(write_agent_config(
        tmp_path / "agent", mosquitto.url, registrador=str(reg.link),
        buffer_extra="max_size_mb = 0.25\nreserve_mb = 0\n"))
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    try:
        agent.start()
        wait_log(agent, "records dropped so far", timeout=60)
        pending_when_full = agent.in_state(0)
        assert agent.in_state(1) == 0
        time.sleep(1.0)  # more frames dropped
        assert agent.in_state(0) >= pending_when_full  # nothing pending was evicted
        mosquitto.start()
        collector.start()
        wait_log(agent, "of the oldest uploaded records evicted", timeout=60)
        until = max(reg.frames())
        deadline = time.monotonic() + 60
        while missing := {s for s in reg.frames() if s <= until} - collector_frames(collector.db):
            assert time.monotonic() < deadline, f"never caught up: {sorted(missing)[:20]}"
            time.sleep(0.2)
        agent.wait_backlog_zero(timeout=45)
        assert agent.stop() == 0, agent.log.read_text()
    finally:
        if agent.proc is not None:
            agent.stop()
        collector.stop()
        reg.stop()

    stored = collector_rows(collector.db)
    seqs = [s for _, s, _, _, _ in stored]
    assert seqs == list(range(1, len(seqs) + 1))  # every seq once, none missing
    assert len({a for a, _, _, _, _ in stored}) == 1
    speeds = [d for _, _, _, kind, d in stored if kind == "speed"]
    assert len(speeds) == len(set(speeds))  # each status frame once
    conn = sqlite3.connect(collector.db)
    bodies = [json.loads(r) for (r,) in conn.execute(
        "SELECT record FROM records WHERE kind = 'device' ORDER BY seq")]
    conn.close()
    full = [b for b in bodies if b.get("status") == "buffer_full"]
    assert len(full) >= 1
    assert full[0]["device"] == "agent"
