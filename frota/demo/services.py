"""The demo's real processes: a private Mosquitto, ``frota collector run``, ``frota agent run``.

Each runs in its own process group, so a Ctrl-C on the terminal reaches only the demo, which then
stops them in order (agent, collector, broker) and waits for each; their output goes to a log file
in the work directory. The configurations written here are ordinary ones: the files the README
and the docs describe, runnable by hand afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from frota.errors import UserError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def mosquitto_binary() -> str:
    """The mosquitto broker's path, or a UserError saying to install it."""
    found = shutil.which("mosquitto")
    if found:
        return found
    if os.access("/usr/sbin/mosquitto", os.X_OK):
        return "/usr/sbin/mosquitto"
    raise UserError("mosquitto not found: install it (Debian: apt-get install mosquitto) "
                    "or run 'bash scripts/demo.sh', which does")


class Child:
    """One child process with its log file; stopped by SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (its own process group; stdout and stderr to the log)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, process_group=0)

    @property
    def pid(self) -> int:
        """The process id (0 before start)."""
        return 0 if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise a UserError (with the end of its log) when the process has died."""
        if self.proc is not None and self.proc.poll() is not None:
            raise UserError(f"the {self.name} stopped (exit status {self.proc.returncode}); "
                            f"see {self.log}: {self.last_line()}")

    def last_line(self) -> str:
        """The last non-empty line of the log (for one-line errors)."""
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return next((line.strip() for line in reversed(lines) if line.strip()), "")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; return the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def frota_argv(*args: str) -> list[str]:
    """The command line of a ``frota`` subcommand run by this interpreter."""
    return [sys.executable, "-m", "frota", *args]


def wait_port(port: int, child: Child, timeout: float = 15.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:port (the child must stay up)."""
    deadline = time.monotonic() + timeout
    while True:
        child.check()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise UserError(f"the {child.name} never listened on port {port}; "
                                f"see {child.log}") from None
            time.sleep(0.05)


def health(port: int) -> dict[str, Any] | None:
    """The collector's ``/health`` body when it answers 200, else None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1.0) as resp:
            body: dict[str, Any] = json.loads(resp.read())
            return body
    except (OSError, ValueError, urllib.error.URLError):
        return None


def wait_healthy(port: int, child: Child, timeout: float = 30.0) -> None:
    """Wait until the collector's ``/health`` says it is connected to the broker."""
    deadline = time.monotonic() + timeout
    while health(port) is None:
        child.check()
        if time.monotonic() > deadline:
            raise UserError(f"the collector never became healthy; see {child.log}")
        time.sleep(0.1)


def held_files(pid: int) -> set[str]:
    """The files a process has open (targets of /proc/PID/fd)."""
    held: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return held
    for fd in fds:
        try:
            held.add(os.readlink(fd))
        except OSError:
            continue
    return held


def wait_open(child: Child, paths: Sequence[str], timeout: float = 30.0) -> None:
    """Wait until ``child`` has every one of ``paths`` open (the agent listening on the ttys)."""
    wanted = {str(Path(p).resolve()) for p in paths}
    deadline = time.monotonic() + timeout
    while not wanted <= held_files(child.pid):
        child.check()
        if time.monotonic() > deadline:
            raise UserError(f"the agent never opened {sorted(wanted - held_files(child.pid))}; "
                            f"see {child.log}")
        time.sleep(0.02)


def write_mosquitto_conf(path: Path, port: int) -> None:
    """A private broker: loopback only, anonymous, nothing persisted."""
    path.write_text(
        "# The demo's private broker (frota demo): loopback only, anonymous, no persistence.\n"
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "persistence false\n"
        "max_queued_messages 100000\n"
        "log_dest stderr\n"
        "log_type error\n"
        "log_type warning\n",
        encoding="utf-8",
    )


def write_collector_conf(path: Path, broker_port: int, http_port: int) -> None:
    """The collector's configuration (docs/collector.md), beside fleet.json and collector.db."""
    path.write_text(
        "# Written by frota demo; run it by hand with: frota collector run --config collector.toml\n"
        'registry = "fleet.json"\n\n'
        "[broker]\n"
        f'url = "mqtt://127.0.0.1:{broker_port}"\n'
        'client_id = "frota-demo-collector"\n\n'
        "[database]\n"
        'path = "collector.db"\n\n'
        "[http]\n"
        'host = "127.0.0.1"\n'
        f"port = {http_port}\n",
        encoding="utf-8",
    )


def write_agent_conf(path: Path, vehicle: str, broker_port: int, ttys: Mapping[str, Path],
                     doors: int) -> None:
    """The agent's configuration (firmware-notes/agent-config.md) for the three simulated lines."""
    # The lines stay quiet for a few seconds while the demo waits for the last records to be
    # confirmed (see frota/commands/demo.py): silent_after_s is long enough not to report that.
    quiet = "silent_after_s = 60\nreopen_min_s = 0.2\nreopen_max_s = 2\n"
    text = (
        "# Written by frota demo; the devices are the scenario player's pseudo-terminals.\n"
        f'vehicle = "{vehicle}"\n\n'
        "[buffer]\n"
        'path = "buffer.sqlite"\n'
        "commit_interval_ms = 100\n\n"
        "[broker]\n"
        f'url = "mqtt://127.0.0.1:{broker_port}"\n'
        f'client_id = "frota-demo-{vehicle}"\n\n'
        "[uplink]\n"
        "batch_interval_ms = 250\n"
        "ack_timeout_s = 5\n\n"
        "[[devices]]\n"
        'name = "registrador"\nprotocol = "registrador"\n'
        f'port = "{ttys["registrador"]}"\nbaudrate = 115200\n{quiet}\n'
        "[[devices]]\n"
        'name = "gps"\nprotocol = "nmea"\n'
        f'port = "{ttys["gps"]}"\nbaudrate = 9600\n{quiet}\n'
        "[[devices]]\n"
        'name = "doors"\nprotocol = "apc"\n'
        f'port = "{ttys["apc"]}"\nbaudrate = 19200\n'
        f"poll_interval_s = 0.1\nreply_timeout_s = 0.2\n{quiet}"
    )
    for door in range(1, doors + 1):
        text += f"\n[[devices.counters]]\naddress = {door}\ndoor = {door}\n"
    path.write_text(text, encoding="utf-8")
