"""``frota agent run`` reading ``frota sim fms`` (an SLCAN adapter on a pty) through unplugs,
garbage and SIGKILLs: every record it committed reaches the collector exactly once, and every
gap in what it read (adapter out, agent down) has a ``device`` record. CAN is broadcast: what
the bus said while the agent was not reading is gone, and only the gap is recorded."""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path

import pytest

from protocols.records import ts_to_ms
from tests.agent.process import AgentProcess
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto
from tests.test_data_path import Simulator, collector_rows

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty, pytest.mark.slow]

KILLS = 6


def _config(folder: Path, broker_url: str, port: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agent.toml"
    path.write_text(
        'vehicle = "ABC1D23"\n'
        '[buffer]\npath = "buffer.sqlite"\ncommit_interval_ms = 50\n'
        f'[broker]\nurl = "{broker_url}"\nclient_id = "agent-under-test"\n'
        "[uplink]\nbatch_records = 200\nbatch_interval_ms = 100\nack_timeout_s = 2.0\n"
        f'[[devices]]\nname = "tacho"\nprotocol = "fms"\nport = "{port}"\nopen_wait_s = 0\n'
        "silent_after_s = 2\nreopen_min_s = 0.1\nreopen_max_s = 0.5\n"
    )
    return path


def test_fms_agent_exactly_once_with_a_device_record_for_every_gap(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    # 20x device time (the Simulator's), TCO1 at 5 Hz, 0.2 % garbage, the adapter pulled out
    # for 5 s about every 40 device seconds.
    sim = Simulator(tmp_path, "fms", "--baud", "0", "--tco1-hz", "5", "--garbage", "0.002",
                    "--seed", "21", "--unplug-every", "40", "--unplug-for", "5")
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    agent = AgentProcess(_config(tmp_path / "agent", mosquitto.url, sim.link))
    rng = random.Random(8)
    speeds = "source = 'tacho' AND kind = 'speed'"
    try:
        sim.wait_ready()
        collector.start()
        for _ in range(KILLS):
            agent.start()
            agent.wait(speeds, agent.count(speeds) + 5)  # reading (and committing) again
            time.sleep(rng.uniform(0.05, 0.6))  # mid-read, mid-commit, mid-publish
            agent.kill()
            time.sleep(rng.uniform(0.2, 0.8))  # the bus goes on: those frames are gone
        agent.start()
        agent.wait(speeds, agent.count(speeds) + 20)
        agent.wait_backlog_zero(timeout=45)
        assert agent.stop() == 0, agent.log.read_text()
    finally:
        if agent.proc is not None:
            agent.stop()
        collector.stop()
        sim.stop()

    committed = agent.query("SELECT seq, body, s.state FROM record_bodies JOIN record_states s USING (seq) ORDER BY seq")
    bodies = [json.loads(str(body)) for _, body, _ in committed]
    assert [row[2] for row in committed if row[2] != 1] == []  # nothing pending or rejected
    assert [b["seq"] for b in bodies] == list(range(1, len(bodies) + 1))
    stored = collector_rows(collector.db)
    assert [(a, s, t) for a, s, t, _, _ in stored] == [(b["agent"], b["seq"], b["ts"]) for b in bodies]

    # Listen-only: the adapter was opened with L, never O, and was never asked to send a frame.
    answered = [json.loads(line)["label"] for line in sim.sent.read_text().splitlines()
                if json.loads(line)["label"].startswith("answer")]
    assert "answer L" in answered
    assert not [a for a in answered if a[-1:] in ("O", "t", "T", "r", "R")], answered

    # One speed record per device second while reading; a gap longer than that is frames the
    # agent did not read, and a device record (disconnected or silent) must say so within it.
    speed_ms = sorted(ts_to_ms(b["ts"]) for b in bodies if b["kind"] == "speed")
    health = [b for b in bodies if b["kind"] == "device" and b["device"] == "registrador"
              and b["status"] in ("disconnected", "silent")]
    health_ms = [ts_to_ms(b["ts"]) for b in health]
    gaps = [(a, b) for a, b in itertools.pairwise(speed_ms) if b - a > 2_500]
    assert len(gaps) >= KILLS  # every kill left one (and unplugs more)
    for a, b in gaps:
        assert any(a <= h <= b for h in health_ms), (a, b, health_ms)
    downs = [b for b in health if "agent was not running" in b.get("detail", "")]
    assert len(downs) == KILLS  # one per restart: the time the agent was down
