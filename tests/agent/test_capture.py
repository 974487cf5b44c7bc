"""`frota agent capture` (issue 14 item 6): a device's raw bytes with their times, through the
running agent (which holds the port) or alone when no agent runs; a capture decoded with
`frota decode --hex` gives back the records the agent stored. Real ptys and a real agent process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.capture import CaptureError, socket_path, through_agent
from frota.cli import main
from protocols.apc import DoorCounts, encode_counts, encode_request
from protocols.apc.frames import READ_COUNTS
from protocols.records import ts_to_ms
from tests.agent.devices import DoorSensor, Registrador
from tests.agent.helpers import VEHICLE, wait_until
from tests.agent.process import AgentProcess, write_agent_config
from tests.services import PROJECT

pytestmark = [pytest.mark.pty, pytest.mark.slow]

NO_BROKER = "mqtt://127.0.0.1:1"  # records stay in the buffer; the capture does not need one


class CountingSensor(DoorSensor):
    """A door head that never stops: one passenger boards per poll, the door opens for 3 polls
    in every 6 — so every few polls there is a door record to compare."""

    def tick(self) -> None:
        """Answer a READ_COUNTS addressed to us."""
        data = self.port.read()
        if len(data) >= 6 and data[1] == self.address and data[2] == READ_COUNTS:
            self.polls += 1
            is_open = self.polls % 6 < 3
            if is_open:
                self.entered += 1
            counts = DoorCounts(open=is_open, entered=self.entered, exited=self.exited)
            self.port.write(encode_counts(self.address, counts))


@pytest.fixture
def devices(tmp_path: Path) -> Iterator[tuple[Registrador, CountingSensor]]:
    """A registrador talking at 50 frames/s and a door head, each on its pty."""
    reg = Registrador(tmp_path / "reg")
    doors = CountingSensor(tmp_path / "apc")
    yield reg, doors
    reg.close()
    doors.close()


def capture(config: Path, device: str, seconds: float, out: Path) -> subprocess.CompletedProcess[str]:
    """`frota agent capture` as a process."""
    return subprocess.run(
        [sys.executable, "-m", "frota", "agent", "capture", "--config", str(config),
         "--device", device, "--seconds", str(seconds), "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=PROJECT,
    )


def decode(protocol: str, path: Path) -> list[dict[str, object]]:
    """`frota decode --hex` of a capture, as the engineer who receives it runs it."""
    run = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", protocol, "--hex",
         "--vehicle", VEHICLE, str(path)],
        capture_output=True, text=True, timeout=120, cwd=PROJECT,
    )
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def stored(agent: AgentProcess, source: str, kind: str) -> list[dict[str, object]]:
    """The agent's records of one source and kind, as canonical records (its agent, seq and
    chain ``prev`` removed)."""
    out = []
    for (body,) in agent.query(
        f"SELECT body FROM record_bodies WHERE source = '{source}' AND kind = '{kind}' ORDER BY seq"
    ):
        record = json.loads(str(body))
        record.pop("agent")
        record.pop("seq")
        record.pop("prev")
        out.append(record)
    return out


def test_capture_through_the_running_agent_decodes_to_what_it_stored(
    tmp_path: Path, devices: tuple[Registrador, CountingSensor]
) -> None:
    reg, doors = devices
    config = write_agent_config(
        tmp_path / "agent", NO_BROKER, registrador=reg.path, apc=doors.path, doors=1
    )
    agent = AgentProcess(config)
    agent.start()
    try:
        agent.wait_open(reg.path, doors.path)
        agent.wait("kind = 'door'", 2)
        door_cap, reg_cap = tmp_path / "doors.hex", tmp_path / "registrador.hex"
        run = capture(config, "doors", 3, door_cap)
        assert run.returncode == 0, run.stderr
        assert "through the running agent" in run.stderr
        polls = doors.polls
        run = capture(config, "registrador", 1, reg_cap)
        assert run.returncode == 0, run.stderr
        assert wait_until(lambda: doors.polls > polls)  # the agent kept polling meanwhile
        # Committed: everything decoded from the captures is in the buffer by now.
        agent.wait("kind = 'door'", len(decode("apc", door_cap)) + 1)
    finally:
        assert agent.stop() == 0
    # The door capture holds the agent's polls and the head's answers, each line timed.
    lines = [ln for ln in door_cap.read_text().splitlines() if not ln.startswith("#")]
    poll = encode_request(1, READ_COUNTS).hex(" ")
    assert sum(ln.split(" ", 1)[1] == poll for ln in lines) >= 3, lines[:10]
    decoded_doors = decode("apc", door_cap)
    stored_doors = stored(agent, "doors", "door")
    # A door record holds the passengers of one opening. The decoder starts at the capture's
    # first answer, so its first record may miss passengers of an opening already under way, and
    # at the end of the input it reports a door still open (`finish`): the records between are
    # the agent's, the same in every field (the time is the agent's time keeper's, both ways).
    inner = decoded_doors[1:-1]
    assert len(inner) >= 2, door_cap.read_text()[:2000]
    for record in inner:
        assert record in stored_doors, (record, [r for r in stored_doors if r["ts"] == record["ts"]])
    first, last = str(inner[0]["ts"]), str(inner[-1]["ts"])
    assert [r for r in stored_doors if first <= str(r["ts"]) <= last] == inner
    # The registrador capture gives back the frames the agent stored, none missing in between.
    decoded_speed = [r for r in decode("registrador", reg_cap) if r["kind"] == "speed"]
    assert len(decoded_speed) >= 10
    seqs = [int(str(r["device_seq"])) for r in decoded_speed]
    assert seqs == list(range(seqs[0], seqs[-1] + 1))
    stored_speed = {int(str(r["device_seq"])): r for r in stored(agent, "registrador", "speed")}
    assert [stored_speed[s] for s in seqs] == decoded_speed
    # The socket went with the agent.
    assert not socket_path(tmp_path / "agent" / "buffer.sqlite").exists()


def test_capture_without_an_agent_opens_the_port_itself(
    tmp_path: Path, devices: tuple[Registrador, CountingSensor]
) -> None:
    reg, doors = devices
    config = write_agent_config(tmp_path / "agent", NO_BROKER, registrador=reg.path, apc=doors.path)
    out = tmp_path / "doors.hex"
    run = capture(config, "doors", 1.5, out)
    assert run.returncode == 0, run.stderr
    assert "(no agent running)" in run.stderr
    assert doors.polls >= 3  # the capture polled the heads as the agent does
    decoded = decode("apc", out)
    assert decoded, out.read_text()[:2000]
    assert {r["door"] for r in decoded if r["kind"] == "door"} == {1}
    out = tmp_path / "reg.hex"
    run = capture(config, "registrador", 1, out)
    assert run.returncode == 0, run.stderr
    seqs = [r["device_seq"] for r in decode("registrador", out) if r["kind"] == "speed"]
    assert len(seqs) >= 10
    assert not (tmp_path / "agent" / "buffer.sqlite").exists()  # a capture keeps no records


def test_capture_never_fights_the_agent_for_the_port(
    tmp_path: Path, devices: tuple[Registrador, CountingSensor]
) -> None:
    reg, _ = devices
    config = write_agent_config(tmp_path / "agent", NO_BROKER, registrador=reg.path)
    # Another configuration naming the same port: it finds no agent of its own, so it would open
    # the port itself — but the running agent holds it (flock), and the capture is refused.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(config, other / "agent.toml")
    agent = AgentProcess(config)
    agent.start()
    try:
        agent.wait_open(reg.path)
        agent.wait("kind = 'speed'", 5)
        run = capture(other / "agent.toml", "registrador", 1, tmp_path / "x.hex")
        assert run.returncode == 1
        assert run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith("frota agent: error: cannot open ")
        assert "lock" in run.stderr
        before = agent.count("kind = 'speed'")
        agent.wait("kind = 'speed'", before + 10)  # the agent reads on, undisturbed
    finally:
        assert agent.stop() == 0


def test_capture_errors_are_one_line(
    tmp_path: Path, devices: tuple[Registrador, CountingSensor], capsys: pytest.CaptureFixture[str]
) -> None:
    reg, _ = devices
    config = write_agent_config(tmp_path / "agent", NO_BROKER, registrador=reg.path)

    def run(device: str, seconds: str, out: Path) -> str:
        argv = ["agent", "capture", "--config", str(config), "--device", device,
                "--seconds", seconds, "--out", str(out)]
        assert main(argv) == 1
        return capsys.readouterr().err

    assert run("gps", "1", tmp_path / "x.hex") == (
        f"frota agent: error: --device: no device 'gps' in {config} (it has: registrador)\n"
    )
    assert run("registrador", "0", tmp_path / "x.hex") == (
        "frota agent: error: --seconds: 0 is not in (0, 3600]\n"
    )
    err = run("registrador", "1", tmp_path / "no-dir" / "x.hex")
    assert err.startswith("frota agent: error: --out: cannot write ")
    assert err.count("\n") == 1
    # The agent's own answer to a device it does not have.
    agent = AgentProcess(config)
    agent.start()
    try:
        agent.wait_open(reg.path)
        assert wait_until(lambda: socket_path(agent.buffer).exists())
        with pytest.raises(CaptureError, match=r"no device 'gps' in this agent \(it has: registrador\)"):
            through_agent(socket_path(agent.buffer), "gps", 1, lambda line: None)
    finally:
        assert agent.stop() == 0


def test_an_fms_capture_through_the_agent_decodes_to_what_it_stored(tmp_path: Path) -> None:
    # An SLCAN adapter on a pty (tests/agent/test_fms_source.py): one device second per 20 ms.
    from tests.agent.test_fms_agent import _config
    from tests.agent.test_fms_source import Adapter

    adapter = Adapter(tmp_path / "can")
    config = _config(tmp_path / "agent", NO_BROKER, Path(adapter.path))
    agent = AgentProcess(config)
    agent.start()
    try:
        agent.wait_open(adapter.path)
        agent.wait("kind = 'speed'", 5)
        out = tmp_path / "tacho.hex"
        run = capture(config, "tacho", 1, out)
        assert run.returncode == 0, run.stderr
        assert "through the running agent" in run.stderr
        decoded = [r for r in decode("fms", out) if r["kind"] == "speed"]
        agent.wait("kind = 'speed'", len(decoded) + 5)
    finally:
        assert agent.stop() == 0
        adapter.close()
    # Frames as SLCAN text (`T<id><len><data>\r`) in hex, which the FMS decoder reads back.
    # Its records are the agent's, the time within 50 ms: a frame's time is its TD anchor plus
    # the time since, which the agent takes from python-can's receive stamp and the capture from
    # its line (measured: 0-1 ms apart, a few up to 12 ms on a loaded machine).
    assert len(decoded) >= 10, out.read_text()[:2000]
    speeds = stored(agent, "tacho", "speed")

    def same(a: dict[str, object], b: dict[str, object]) -> bool:
        apart = abs(ts_to_ms(str(a["ts"])) - ts_to_ms(str(b["ts"])))
        return apart <= 50 and {**a, "ts": ""} == {**b, "ts": ""}

    for record in decoded:
        assert any(same(record, s) for s in speeds), record
