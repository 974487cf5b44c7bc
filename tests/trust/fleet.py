"""A whole provisioned fleet running for the trust tests: Mosquitto on the provisioned
configuration, ``frota collector run`` on the provisioned collector.toml, and in-process agent
uplinks loaded from the provisioned agent.toml files."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from agent.buffer import Buffer
from agent.config import AgentConfig, load_config
from agent.uplink import Uplink
from collector import tokens
from tests.agent.helpers import T0_MS, wait_until
from tests.services import PROJECT, free_port, stop_process
from tests.trust.broker import Running, provisioned_broker

A, B = "ABC1D23", "XYZ9K88"


@dataclass
class Fleet:
    """The running fleet."""

    broker: Running
    collector: subprocess.Popen[bytes]
    http: str
    admin: str
    log: Path

    @property
    def folder(self) -> Path:
        return self.broker.fleet.folder

    @property
    def db(self) -> Path:
        return self.folder / "collector.db"

    def agent_config(self, vehicle: str) -> AgentConfig:
        return load_config(self.folder / "vehicles" / vehicle / "agent.toml")

    def health(self) -> httpx.Response:
        return httpx.get(self.http + "/health", headers={"Authorization": f"Bearer {self.admin}"},
                         timeout=5)


@contextmanager
def running_fleet(registered: tuple[str, ...] = (A, B)) -> Iterator[Fleet]:
    """Provision A and B, write the registry (with ``registered``), start the broker and the
    collector."""
    with provisioned_broker((A, B)) as broker:
        folder = broker.fleet.folder
        registry = {"lines": [], "drivers": [],
                    "vehicles": [{"id": v, "seats": 46} for v in registered]}
        Path(broker.fleet.registry).write_text(json.dumps(registry))
        port = free_port()
        config = folder / "collector.toml"
        config.write_text(re.sub(r"(?m)^port = 8080", f"port = {port}", config.read_text()))
        admin = tokens.add(folder / "tokens.json", "admin")[1]
        log = folder.parent / "collector.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "frota", "collector", "run", "--config", str(config)],
                cwd=PROJECT, stdout=out, stderr=subprocess.STDOUT,
            )
        running = Fleet(broker, proc, f"http://127.0.0.1:{port}", admin, log)
        try:
            def healthy() -> bool:
                assert proc.poll() is None, log.read_text()
                try:
                    return running.health().status_code == 200
                except httpx.TransportError:
                    return False

            assert wait_until(healthy, 30), log.read_text()
            yield running
        finally:
            stop_process(proc, signal.SIGTERM, 15)


def speed(vehicle: str, n: int, kmh: float = 77.0) -> dict[str, object]:
    """A registrador speed record, frame ``n``, ``n`` seconds after T0."""
    from protocols.records import make_record, ms_to_ts

    return make_record("speed", vehicle, ms_to_ts(T0_MS + n * 1000), kmh=kmh, device_seq=n,
                       raw="aa55")


@contextmanager
def uplink(config: AgentConfig) -> Iterator[Uplink]:
    """An agent's uplink on ``config``, started and stopped."""
    up = Uplink(config)
    up.start()
    try:
        yield up
    finally:
        up.stop()


def capture(config: AgentConfig, records: list[dict[str, object]]) -> list[int]:
    """Records captured in the agent's buffer, as its writer does; their seqs."""
    buf = Buffer(config.buffer.path)
    try:
        return buf.add([("registrador", rec) for rec in records])
    finally:
        buf.close()


def wait_stored(up: Uplink, count: int, timeout: float = 30) -> bool:
    """Until the agent's buffer says ``count`` records stored."""
    return wait_until(lambda: up.buffer.counts().stored >= count, timeout)

