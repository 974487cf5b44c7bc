"""Nothing lost, nothing twice (issue 11), through the public CLI with real processes: the
registrador simulator on a pty with its noise options, a private Mosquitto, the collector, the
agent (SIGKILLed). Every check is against what the simulator says it made and sent (its memory,
``--history``; its ``--sent-log``): every frame the registrador still holds reaches the collector
once, and the agent's seqs reach it without a gap (the collector drops a second copy of a frame
by its device key, so a frame captured twice shows as a seq missing at the collector).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.agent.process import AgentProcess, write_agent_config
from tests.agent.test_full_disk_agent import wait_log
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto
from tests.test_data_path import Simulator, collector_rows

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty, pytest.mark.slow]


def stored_frames(db: Path) -> dict[int, int]:
    """Frame number → how many ``speed`` records of it the collector holds (one per status
    frame; 0 for an event frame, whose records are driver, trip, device…)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT device_seq, SUM(kind = 'speed') FROM records WHERE device_seq IS NOT NULL "
            "GROUP BY device_seq"
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {int(d): int(n) for d, n in rows}


def wait_frames(db: Path, frames: set[int], agent: AgentProcess, timeout: float) -> None:
    """Wait until the collector holds every one of ``frames``."""
    deadline = time.monotonic() + timeout
    while missing := frames - set(stored_frames(db)):
        assert agent.proc is None or agent.proc.poll() is None, agent.log.read_text()[-3000:]
        assert time.monotonic() < deadline, (
            f"{len(missing)} frames never stored: {sorted(missing)[:30]}\n"
            + agent.log.read_text()[-3000:])
        time.sleep(0.2)


def check_once(db: Path) -> None:
    """The agent's seqs 1…N at the collector without a gap, one agent, each frame once."""
    stored = collector_rows(db)
    seqs = [s for _, s, _, _, _ in stored]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len({a for a, _, _, _, _ in stored}) == 1
    assert all(n <= 1 for n in stored_frames(db).values())


def test_a_noisy_line_loses_no_frame_the_registrador_holds(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    # BER 1e-3 on the registrador's line (live frames and history answers alike): about 38 %
    # of the frames arrive broken, and so do history ends and records. 600 frames wait in the
    # registrador's memory (--history) and more come live; every one must be stored once.
    reg = Simulator(tmp_path, "registrador", "--idle", "--history", "600", "--ber", "1e-3",
                    "--seed", "11", "--time-scale", "5")
    reg.wait_ready()
    agent = AgentProcess(write_agent_config(tmp_path / "agent", mosquitto.url,
                                            registrador=str(reg.link)))
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    try:
        collector.start()
        agent.start()
        deadline = time.monotonic() + 30
        while not reg.frames():
            assert time.monotonic() < deadline, "the simulator sent nothing"
            time.sleep(0.1)
        first_live = min(reg.frames())
        assert first_live == 601  # frames 1-600 were made before the line existed
        time.sleep(5)  # live frames, many broken by the noise
        until = max(reg.frames())
        wait_frames(collector.db, set(range(1, until + 1)), agent, timeout=180)
        agent.wait_backlog_zero(timeout=45)
        assert agent.stop() == 0, agent.log.read_text()[-3000:]
    finally:
        if agent.proc is not None:
            agent.stop()
        collector.stop()
        reg.stop()
    check_once(collector.db)
    log = agent.log.read_text()
    assert "lost: no longer in its memory" not in log
    assert "never arrived whole" not in log  # the old give-up after 3 tries


def test_a_full_buffer_and_kills_capture_no_frame_twice(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    # The case: a small buffer (max_size_mb 0.25) with the broker down fills and drops
    # frames; once the broker and the collector come, uploaded records are evicted to make room
    # while the dropped frames are fetched again; the agent is SIGKILLed in the middle and
    # restarted. Frames uploaded and evicted must never be captured again under new seqs.
    mosquitto.stop()
    reg = Simulator(tmp_path, "registrador", "--baud", "0", "--time-scale", "100")
    reg.wait_ready()
    config = write_agent_config(tmp_path / "agent", mosquitto.url, registrador=str(reg.link),
                                buffer_extra="max_size_mb = 0.25\nreserve_mb = 0\n")
    agent = AgentProcess(config)
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    try:
        agent.start()
        wait_log(agent, "records dropped so far", timeout=60)
        mosquitto.start()
        collector.start()
        wait_log(agent, "of the oldest uploaded records evicted", timeout=60)
        for _ in range(3):  # killed while it evicts and catches up, three times
            time.sleep(1.5)
            agent.kill()
            agent.start()
        until = max(reg.frames())
        wait_frames(collector.db, set(range(1, until + 1)), agent, timeout=180)
        agent.wait_backlog_zero(timeout=45)
        assert agent.stop() == 0, agent.log.read_text()[-3000:]
    finally:
        if agent.proc is not None:
            agent.stop()
        collector.stop()
        reg.stop()
    check_once(collector.db)
    assert "lost: no longer in its memory" not in agent.log.read_text()
