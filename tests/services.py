"""Real services for tests: a private Mosquitto per test, PostgreSQL, the shared corpora.

With ``CI=true`` a missing service or corpus fails the test; elsewhere the test is skipped and says why.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn

# The processes (broker, collector, agent, simulators) come from the one harness the demo and
# the benchmarks use too; re-exported here for the tests.
from frota.harness import (
    PROJECT,
    Mosquitto,
    free_port,
    mosquitto_binary,
    stop_process,
    wait_port,
)

__all__ = [
    "CORPORA",
    "PROJECT",
    "Mosquitto",
    "free_port",
    "in_ci",
    "mosquitto_binary",
    "postgres_available",
    "require",
    "serve_app",
    "stop_process",
    "wait_port",
]

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


def postgres_available(host: str = "127.0.0.1", port: int = 5432) -> bool:
    """True when something accepts connections where PostgreSQL should be."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn on a free loopback port in a thread, for the tests
    that talk to it over a real socket; yields its base URL and stops the server on exit."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def unnamed_files() -> int:
    """This process's descriptors on deleted files: a temporary file has no name (O_TMPFILE, or
    unlinked at once), and its descriptor reads "… (deleted)"."""
    out = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            out += os.readlink(f"/proc/self/fd/{fd}").endswith("(deleted)")
        except OSError:  # closed meanwhile
            continue
    return out
