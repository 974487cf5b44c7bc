"""``frota agent run`` as a real process, its configuration, and a look into its buffer."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.agent.helpers import VEHICLE
from tests.services import PROJECT, stop_process


def write_agent_config(
    folder: Path,
    broker_url: str,
    *,
    registrador: str | None = None,
    gps: str | None = None,
    apc: str | None = None,
    ack_timeout_s: float = 2.0,
    doors: int = 1,
    buffer_extra: str = "",
) -> Path:
    """An agent.toml with the given device paths and test-friendly timings (``doors`` counters
    at addresses 1…doors; ``buffer_extra``: more TOML lines for ``[buffer]``)."""
    folder.mkdir(parents=True, exist_ok=True)
    quick = "silent_after_s = 2\nreopen_min_s = 0.1\nreopen_max_s = 0.5\n"
    text = (
        f'vehicle = "{VEHICLE}"\n'
        f'[buffer]\npath = "buffer.sqlite"\ncommit_interval_ms = 50\n{buffer_extra}'
        f'[broker]\nurl = "{broker_url}"\nclient_id = "agent-under-test"\n'
        f"[uplink]\nbatch_records = 200\nbatch_interval_ms = 100\nmax_in_flight = 4\n"
        f"ack_timeout_s = {ack_timeout_s}\n"
    )
    if registrador:
        text += f'[[devices]]\nname = "registrador"\nprotocol = "registrador"\nport = "{registrador}"\n{quick}'
    if gps:
        text += f'[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "{gps}"\nbaudrate = 9600\n{quick}'
    if apc:
        text += (
            f'[[devices]]\nname = "doors"\nprotocol = "apc"\nport = "{apc}"\nbaudrate = 19200\n'
            f"poll_interval_s = 0.05\nreply_timeout_s = 0.2\n{quick}"
        )
        for address in range(1, doors + 1):
            text += f"[[devices.counters]]\naddress = {address}\ndoor = {address}\n"
    path = folder / "agent.toml"
    path.write_text(text)
    return path


class AgentProcess:
    """The agent as a real process; its log goes to ``agent.log`` beside the config."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.folder = config.parent
        self.buffer = self.folder / "buffer.sqlite"
        self.log = self.folder / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None) -> None:
        """Start ``frota agent run`` (with ``env`` added to the environment)."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "frota", "agent", "run", "--config", str(self.config)],
                cwd=PROJECT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=None if env is None else {**os.environ, **env},
            )

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye (a power cut, as far as the process can tell)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def wait_open(self, *ttys: str, timeout: float = 20.0) -> None:
        """Wait until the agent process has every one of ``ttys`` open (seen in /proc)."""
        assert self.proc is not None
        fds = Path(f"/proc/{self.proc.pid}/fd")
        wanted = {str(Path(t).resolve()) for t in ttys}
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            held = set()
            for fd in fds.iterdir():
                try:
                    held.add(os.readlink(fd))
                except OSError:
                    continue
            if wanted <= held:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the agent never opened {wanted - held}: {self.log.read_text()}")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait; return the exit status."""
        if self.proc is None:
            return 0
        status = stop_process(self.proc, sig, 30)
        self.proc = None
        return status

    def query(self, sql: str) -> list[tuple[object, ...]]:
        """Run a read query on the agent's buffer (WAL: safe while the agent writes)."""
        if not self.buffer.exists():
            return []
        conn = sqlite3.connect(f"file:{self.buffer}?mode=ro", uri=True, timeout=10)
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            conn.close()

    def count(self, where: str = "1") -> int:
        """Records in the buffer matching ``where``."""
        rows = self.query(f"SELECT COUNT(*) FROM records WHERE {where}")
        return int(str(rows[0][0])) if rows else 0

    def wait(self, where: str, at_least: int, timeout: float = 30.0) -> None:
        """Wait until the buffer holds ``at_least`` records matching ``where``."""
        deadline = time.monotonic() + timeout
        while self.count(where) < at_least:
            assert self.proc is not None
            assert self.proc.poll() is None, self.log.read_text()
            if time.monotonic() > deadline:
                raise TimeoutError(f"buffer never reached {at_least} for {where}: {self.log.read_text()}")
            time.sleep(0.05)

    def wait_backlog_zero(self, timeout: float = 30.0) -> None:
        """Wait until the collector has answered every record in the buffer."""
        deadline = time.monotonic() + timeout
        while self.count("state = 0") > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"backlog still {self.count('state = 0')}: {self.log.read_text()}")
            time.sleep(0.05)
