"""Shared helpers for the agent's tests: configs, records and waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config import AgentConfig, parse_config
from protocols.records import Record, make_record, ms_to_ts

VEHICLE = "ABC1D23"
T0_MS = 1_772_460_000_000  # 2026-03-02T14:00:00.000Z


def config(tmp_path: Path, broker_url: str = "mqtt://127.0.0.1:1", **uplink: Any) -> AgentConfig:
    """A minimal valid configuration with the buffer in ``tmp_path``."""
    return parse_config(
        {
            "vehicle": VEHICLE,
            "buffer": {"path": str(tmp_path / "buffer.sqlite"), "commit_interval_ms": 20},
            "broker": {"url": broker_url, "client_id": f"agent-{tmp_path.name}"},
            "uplink": {"batch_interval_ms": 50, "ack_timeout_s": 2.0, **uplink},
        }
    )


def speed(n: int, device_seq: int | None = None) -> Record:
    """A registrador speed record, one second after the previous one."""
    return make_record(
        "speed", VEHICLE, ms_to_ts(T0_MS + n * 1000), kmh=float(n % 100), device_seq=device_seq,
        raw="aa55",
    )


def wait_until(cond: Callable[[], object], timeout: float = 20.0) -> bool:
    """Poll ``cond()`` until true or timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False
