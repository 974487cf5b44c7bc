"""The Pi's clock jumps (issue 5): it boots three years in the past, then NTP steps it right.

The system clock cannot be changed here, so the agent's view of it is: ``agent/hostclock.py`` is
the one place the agent reads the host clock, and ``FROTA_AGENT_CLOCK_OFFSET_FILE`` adds the
number of seconds in a file to it (re-read at every call). Real processes: the simulated
registrador and GPS on ptys, the agent, a private Mosquitto and the collector.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocols.records import ts_to_ms
from tests.agent.process import AgentProcess, write_agent_config
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto
from tests.test_data_path import START, Simulator, collector_rows

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty]

THREE_YEARS_S = 3 * 365 * 86_400  # 94 608 000 s


def test_host_clock_in_the_past_then_stepped_is_recorded_and_times_stay_device_times(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    reg = Simulator(tmp_path, "registrador", "--baud", "0")
    gps = Simulator(tmp_path, "gps", "--baud", "0")
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", mosquitto.url)
    collector.start()
    offset = tmp_path / "clock-offset"
    offset.write_text(f"-{THREE_YEARS_S}")  # booted with a clock three years behind
    agent = AgentProcess(write_agent_config(
        tmp_path / "agent", mosquitto.url, registrador=str(reg.link), gps=str(gps.link)))
    try:
        for sim in (reg, gps):
            sim.wait_ready()
        agent.start(env={"FROTA_AGENT_CLOCK_OFFSET_FILE": str(offset)})
        agent.wait("body LIKE '%behind device time%'", 1)
        offset.write_text("0")  # NTP steps the clock forward
        agent.wait("body LIKE '%host clock stepped%'", 1)
        agent.wait("kind = 'speed'", 20)
        agent.wait_backlog_zero()
        assert agent.stop() == 0, agent.log.read_text()
    finally:
        if agent.proc is not None:
            agent.stop()
        collector.stop()
        for sim in (reg, gps):
            sim.stop()

    bodies = [json.loads(str(b)) for (b,) in agent.query("SELECT body FROM record_bodies ORDER BY seq")]
    jumps = [b for b in bodies if b["kind"] == "device" and b.get("status") == "clock_jump"]
    assert [b["device"] for b in jumps] == ["agent", "agent"]
    assert "behind device time" in jumps[0]["detail"]
    assert jumps[1]["detail"] == "host clock stepped +1095 d"  # 3 × 365 days
    # Record times are device times: from the simulators' start on, never the Pi's 2023, and
    # never its clock after the step (2026-11 or whenever this runs), bar the one record made
    # before any device time was seen, which says so.
    start = ts_to_ms(START)
    # The latest time either clocked device gave (registrador speed, GPS position): under load
    # the GPS may run seconds ahead of the last registrador frame the agent stored.
    device_now = max(ts_to_ms(b["ts"]) for b in bodies if b["kind"] in ("speed", "position"))
    for body in bodies:
        if "ts from the host clock" in body.get("detail", ""):
            continue
        assert start <= ts_to_ms(body["ts"]) <= device_now + 5_000, body
    # And each record reached the collector once, with its ts. (The agent's first record,
    # stamped by the host clock of 2023, is older than the retention by device time: once
    # uploaded, the agent deleted it — the collector has it.)
    stored = collector_rows(collector.db)
    assert [s for _, s, _, _, _ in stored] == list(range(1, bodies[-1]["seq"] + 1))
    kept = {b["seq"] for b in bodies}
    assert [(a, s, t) for a, s, t, _, _ in stored if s in kept] == [
        (b["agent"], b["seq"], b["ts"]) for b in bodies]
    assert kept == set(range(2, bodies[-1]["seq"] + 1))
