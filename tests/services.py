"""Real services for tests: a private Mosquitto per test, PostgreSQL, the shared corpora.

With ``CI=true`` a missing service or corpus fails the test; elsewhere the test is skipped and says why.
"""

from __future__ import annotations

import os
import socket

import pytest

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
