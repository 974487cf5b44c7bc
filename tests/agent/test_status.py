"""``frota agent status`` as a real process on a buffer written by the agent's own Buffer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.buffer import Buffer
from protocols.records import make_record
from tests.agent.helpers import VEHICLE, speed
from tests.services import PROJECT


def frota(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frota", *args], cwd=PROJECT,
                          capture_output=True, text=True, check=False)


def write_config(folder: Path) -> Path:
    path = folder / "agent.toml"
    path.write_text(
        f'vehicle = "{VEHICLE}"\n[buffer]\npath = "buffer.sqlite"\n'
        '[broker]\nurl = "mqtt://127.0.0.1:1"\n'
        '[[devices]]\nname = "reg"\nprotocol = "registrador"\nport = "/dev/ttyFROTA-reg"\n'
        '[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "/dev/ttyFROTA-gps"\n'
    )
    return path


def health(status: str, device: str, at: str) -> tuple[str, dict[str, object]]:
    return "agent", make_record("device", VEHICLE, at, device=device, status=status,
                                detail=f"{device} is {status}")


def test_status_shows_backlog_ack_devices_and_disk(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    buffer = Buffer(tmp_path / "buffer.sqlite")
    buffer.add([("reg", speed(n, device_seq=n + 1)) for n in range(10)])  # seqs 1-10
    buffer.add([health("disconnected", "registrador", "2026-03-02T14:00:20.000Z")])  # 11
    buffer.add([health("ok", "registrador", "2026-03-02T14:00:30.000Z")])  # 12
    buffer.add([health("silent", "gps", "2026-03-02T14:00:31.000Z")])  # 13
    buffer.mark([(1, 7)], [(8, 8, "bad record")])
    agent = buffer.agent
    buffer.close()

    done = frota("agent", "status", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["agent"] == agent
    assert (status["backlog"], status["stored"], status["rejected"]) == (5, 7, 1)  # 9-13; 1-7; 8
    assert status["backlog_oldest_ts"] == "2026-03-02T14:00:08.000Z"  # seq 9 = speed(8): T0 + 8 s
    assert status["last_seq"] == 13
    assert status["last_ack"] is not None
    assert status["disk_free_bytes"] > 0
    reg, gps = status["devices"]
    assert (reg["name"], reg["status"], reg["status_ts"]) == ("reg", "ok", "2026-03-02T14:00:30.000Z")
    assert reg["last_record_s_ago"] is not None
    assert (gps["name"], gps["status"]) == ("gps", "silent")
    assert gps["last_record_s_ago"] is None  # the GPS never gave a record

    text = frota("agent", "status", "--config", str(config))
    assert text.returncode == 0, text.stderr
    assert "backlog  5 records not yet confirmed" in text.stdout
    assert "7 stored, 1 rejected (0 retryable), 0 in conflict; last seq 13" in text.stdout
    assert "disk left" in text.stdout
    assert any(line.split()[:3] == ["reg", "registrador", "ok"] for line in text.stdout.splitlines())


def test_status_without_a_buffer_is_one_line(tmp_path: Path) -> None:
    done = frota("agent", "status", "--config", str(write_config(tmp_path)))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "no buffer at" in done.stderr
