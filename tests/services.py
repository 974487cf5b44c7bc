"""Real services for tests: a private Mosquitto per test, PostgreSQL, the shared corpora.

With ``CI=true`` a missing service or corpus fails the test; elsewhere the test is skipped and says why.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parent.parent
CORPORA = PROJECT.parent / "shared" / "corpora"


def in_ci() -> bool:
    """True when running under CI (``CI=true``), where missing services fail instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Fail under CI, skip elsewhere, when something a test needs is missing."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port(port: int, timeout: float = 10.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def stop_process(proc: subprocess.Popen[Any], sig: int, timeout: float) -> int:
    """Send ``sig``, wait up to ``timeout`` seconds, then SIGKILL and wait; return the status."""
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def mosquitto_binary() -> str | None:
    """Path of the mosquitto broker, or None."""
    found = shutil.which("mosquitto")
    if found:
        return found
    return "/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None


class Mosquitto:
    """A private broker on a free loopback port; can be stopped and started again (same port)."""

    def __init__(self, workdir: Path) -> None:
        binary = mosquitto_binary()
        assert binary is not None
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            "max_queued_messages 100000\n"
            "max_inflight_messages 100\n"
            "log_dest stderr\n"
            "log_type error\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The broker's URL (mqtt://127.0.0.1:PORT)."""
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the broker and wait until it accepts connections."""
        with (self.workdir / "mosquitto.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT
            )
        wait_port(self.port)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL)."""
        if self.proc is None:
            return
        stop_process(self.proc, signal.SIGTERM, 5)
        self.proc = None


def postgres_available(host: str = "127.0.0.1", port: int = 5432) -> bool:
    """True when something accepts connections where PostgreSQL should be."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
