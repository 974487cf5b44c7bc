"""The broker, the collector, the agent and the simulators as real processes.

Each is a :class:`~frota.harness.process.Child` with what its users wait for: the broker's port,
the collector's ``/health``, the agent's open ttys, the simulator's pty link. The configurations
are the caller's (ordinary files, as the docs describe); only the broker's is written here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from frota.harness.process import Child, HarnessError, free_port, frota_argv, wait_port


def mosquitto_binary() -> str | None:
    """Path of the mosquitto broker, or None."""
    found = shutil.which("mosquitto")
    if found:
        return found
    return "/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None


class Mosquitto:
    """A private broker on a free loopback port (loopback only, anonymous, nothing persisted);
    can be stopped and started again on the same port. ``conf`` may be rewritten before start."""

    def __init__(self, workdir: Path, port: int | None = None, *, own_group: bool = False) -> None:
        binary = mosquitto_binary()
        if binary is None:
            raise HarnessError("mosquitto not found: install it (Debian: apt-get install mosquitto)")
        self.binary = binary
        self.port = port or free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text(
            "# A private broker: loopback only, anonymous, no persistence.\n"
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            "max_queued_messages 100000\n"
            "max_inflight_messages 100\n"
            "log_dest stderr\n"
            "log_type error\n"
            "log_type warning\n",
            encoding="utf-8",
        )
        self.child = Child("broker (mosquitto)", [binary, "-c", str(self.conf)],
                           workdir / "mosquitto.log", own_group=own_group, stop_timeout=5)

    @property
    def url(self) -> str:
        """The broker's URL (mqtt://127.0.0.1:PORT)."""
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The broker's process id (0 when stopped)."""
        return self.child.pid

    def start(self) -> None:
        """Start the broker and wait until it accepts connections."""
        self.child.start()
        wait_port(self.port, child=self.child)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL)."""
        self.child.stop()


def health(port: int, token: str | None = None) -> tuple[int, dict[str, Any]] | None:
    """The collector's ``/health`` status and body, or None when it does not answer (``token``:
    the API token a collector with ``http.tokens_file`` asks for)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/health")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2.0) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:  # 503: answering, not connected to the broker
        try:
            return int(err.code), json.loads(err.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def write_collector_files(folder: Path, broker_url: str, fleet: Mapping[str, Any], *,
                          http_port: int | None = None, extra: str = "",
                          client_id: str = "collector-under-test") -> tuple[Path, int]:
    """A collector's files in ``folder``: ``fleet.json`` (the registry ``fleet``) and
    ``collector.toml`` (``extra``: more top-level TOML lines; the database ``collector.db``; a
    free HTTP port unless given). Returns the configuration's path and the HTTP port."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.json").write_text(json.dumps(fleet), encoding="utf-8")
    port = free_port() if http_port is None else http_port
    config = folder / "collector.toml"
    config.write_text(
        'registry = "fleet.json"\n'
        f"{extra}"
        f'[broker]\nurl = "{broker_url}"\nclient_id = "{client_id}"\n'
        '[database]\npath = "collector.db"\n'
        f'[http]\nhost = "127.0.0.1"\nport = {port}\n',
        encoding="utf-8",
    )
    return config, port


class _FrotaProcess:
    """What a ``frota`` process run by the harness shows of its :class:`Child`."""

    child: Child

    @property
    def log(self) -> Path:
        """The process's log file."""
        return self.child.log

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The running process (None when stopped)."""
        return self.child.proc

    @property
    def pid(self) -> int:
        """The process id (0 when stopped)."""
        return self.child.pid

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM: a clean stop) and wait; the exit status."""
        status = self.child.stop(sig)
        return 0 if status is None else status


class CollectorProcess(_FrotaProcess):
    """``frota collector run --config CONFIG`` listening on ``http_port`` (as CONFIG says)."""

    def __init__(self, config: Path, http_port: int, log: Path | None = None, *,
                 own_group: bool = False, token: str | None = None) -> None:
        self.config = config
        self.port = http_port
        #: The API token for ``/health`` (a collector with ``http.tokens_file``).
        self.token = token
        self.child = Child("collector", frota_argv("collector", "run", "--config", str(config)),
                           log or config.parent / "collector.log", own_group=own_group,
                           stop_timeout=15)

    @property
    def base(self) -> str:
        """The HTTP base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait_connected: bool = True, timeout: float = 30.0) -> None:
        """Start it and wait until ``/health`` answers (200, connected, when ``wait_connected``)."""
        self.child.start()
        self.wait_health(200 if wait_connected else None, timeout)

    def wait_health(self, status: int | None, timeout: float = 30.0) -> dict[str, Any]:
        """Poll ``/health`` until it answers (with ``status`` when given); its body."""
        deadline = time.monotonic() + timeout
        while True:
            self.child.check()
            answer = health(self.port, self.token)
            if answer is not None and (status is None or answer[0] == status):
                return answer[1]
            if time.monotonic() > deadline:
                raise HarnessError(f"the collector's /health never answered {status or ''} in "
                                   f"{timeout} s; see {self.log}: {self.child.last_line()}")
            time.sleep(0.05)


class AgentProcess(_FrotaProcess):
    """``frota agent run --config CONFIG``; its log beside the configuration unless given."""

    def __init__(self, config: Path, log: Path | None = None, *, own_group: bool = False) -> None:
        self.config = config
        self.child = Child("agent", frota_argv("agent", "run", "--config", str(config)),
                           log or config.parent / "agent.log", own_group=own_group,
                           stop_timeout=30)

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the agent (``env`` added to the environment)."""
        self.child.start(env)

    def wait_open(self, *ttys: str | Path, timeout: float = 30.0) -> None:
        """Wait until the agent has every one of ``ttys`` open."""
        self.child.wait_open(ttys, timeout)

    def kill(self) -> None:
        """SIGKILL: a power cut, as far as the process can tell."""
        self.child.kill()


class SimulatorProcess:
    """``frota sim DEVICE --link LINK ARGS…``: a simulated device on a pty reachable at ``link``."""

    def __init__(self, device: str, link: Path, *args: str, log: Path | None = None) -> None:
        self.device = device
        self.link = link
        self.child = Child(f"{device} simulator",
                           frota_argv("sim", device, "--link", str(link), *args),
                           log or link.with_name(f"{link.name}.log"), stop_timeout=10)

    @property
    def pid(self) -> int:
        """The process id (0 when stopped)."""
        return self.child.pid

    def start(self) -> None:
        """Start the simulator (see :meth:`wait_ready`)."""
        self.child.start()

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until its pty link is there."""
        deadline = time.monotonic() + timeout
        while not self.link.exists():
            self.child.check()
            if time.monotonic() > deadline:
                raise HarnessError(f"no pty at {self.link} after {timeout} s; see {self.child.log}")
            time.sleep(0.02)

    def stop(self) -> int | None:
        """SIGINT (the simulators' clean stop), then SIGKILL."""
        return self.child.stop(signal.SIGINT)
