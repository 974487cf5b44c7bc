"""``frota agent run`` as a real process, its configuration, and a look into its buffer."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from frota import harness
from tests.agent.helpers import VEHICLE


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


class AgentProcess(harness.AgentProcess):
    """The agent as a real process (the harness's), with a look into its buffer for the tests;
    its log goes to ``agent.log`` beside the config."""

    def __init__(self, config: Path) -> None:
        super().__init__(config)
        self.folder = config.parent
        self.buffer = self.folder / "buffer.sqlite"

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

    def in_state(self, state: int) -> int:
        """Records in the buffer in upload state ``state`` (0 pending, 1 stored, 2 rejected,
        3 conflict: the view ``record_states``, stored being kept as ranges)."""
        rows = self.query(f"SELECT COUNT(*) FROM record_states WHERE state = {int(state)}")
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
        while self.in_state(0) > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"backlog still {self.in_state(0)}: {self.log.read_text()}")
            time.sleep(0.05)
