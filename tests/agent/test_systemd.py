"""systemd integration: sd_notify datagrams and the unit file."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from agent.systemd import Notifier
from tests.services import PROJECT, require

UNIT = PROJECT / "firmware-notes" / "systemd" / "frota-agent.service"


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = Notifier(environ={})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert notifier.ready() is False


def test_ready_watchdog_status_reach_the_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(2)
        notifier = Notifier(
            environ={
                "NOTIFY_SOCKET": str(path),
                "WATCHDOG_USEC": "30000000",
                "WATCHDOG_PID": str(os.getpid()),
            }
        )
        # WatchdogSec=30s → ping every 15 s (half the timeout, as sd_watchdog_enabled(3) advises).
        assert notifier.watchdog_interval == 15.0
        assert notifier.ready()
        assert notifier.watchdog()
        assert notifier.status("backlog 0\nok")
        assert server.recv(256) == b"READY=1"
        assert server.recv(256) == b"WATCHDOG=1"
        assert server.recv(256) == b"STATUS=backlog 0 ok"


def test_watchdog_for_another_pid_is_ignored() -> None:
    notifier = Notifier(environ={"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"})
    assert notifier.watchdog_interval is None


def test_vanished_socket_is_not_an_error(tmp_path: Path) -> None:
    notifier = Notifier(environ={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notifier.enabled
    assert notifier.ready() is False


def _verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    unit = tmp_path / "frota-agent.service"
    frota = Path(sys.executable).with_name("frota")
    unit.write_text(unit_text.replace("/opt/frota/.venv/bin/frota", str(frota)))
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )


def test_unit_file_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    text = UNIT.read_text()
    assert "Type=notify" in text
    assert "WatchdogSec=" in text
    result = _verify(text, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "frota-agent.service" not in result.stderr, result.stderr


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    # The check above is only worth something if verify rejects a bad unit.
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    result = _verify(UNIT.read_text().replace("Type=notify", "Type=notifyy"), tmp_path)
    assert "Failed to parse service type" in result.stderr
    missing = UNIT.read_text().replace("/opt/frota/.venv/bin/frota", "/nonexistent/frota")
    result = _verify(missing, tmp_path)
    assert result.returncode != 0
    assert "not executable" in result.stderr
