"""``frota agent status``: what the agent's buffer says, read without disturbing the agent.

The buffer is read through :mod:`agent.buffer_summary` (read-only; WAL: the running agent
keeps writing). Shown: the backlog (records
the collector has not confirmed), the last acknowledgement, each configured device's health (its
latest ``device`` record and how long since it last gave a record) and the disk left. Times
"ago" are by the host clock (diagnostics, as ``captured_ms``/``acked_ms`` are); record times
are device times.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agent import hostclock
from agent.buffer import BufferError
from agent.buffer_summary import BufferReader
from agent.config import AgentConfig
from agent.diskroom import reserve_path
from agent.durations import human_duration
from protocols.records import ms_to_ts


class StatusError(RuntimeError):
    """The buffer cannot be read (missing, not a buffer)."""


def _now_ms() -> int:
    return hostclock.wall_ms()


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return ms_to_ts(ms)


def _file_size(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += path.with_name(path.name + suffix).stat().st_size
        except OSError:
            continue
    return total


def collect(config: AgentConfig, now_ms: int | None = None) -> dict[str, Any]:
    """The status as plain data (what ``--json`` prints)."""
    now = _now_ms() if now_ms is None else now_ms
    path = config.buffer.path
    try:
        with BufferReader(path) as reader:
            summary = reader.summary(d.name for d in config.devices)
    except BufferError as err:
        raise StatusError(str(err)) from err
    fs = os.statvfs(path.parent)
    devices = []
    for device in config.devices:
        health = summary.devices.get(device.device)
        last = summary.last_captured_ms.get(device.name)
        devices.append(
            {
                "name": device.name,
                "device": device.device,
                "port": device.port,
                "status": health.status if health else None,
                "status_ts": health.ts if health else None,
                "detail": health.detail if health else None,
                "last_record_s_ago": None if last is None else round((now - last) / 1000, 1),
            }
        )
    agent = summary.devices.get("agent")
    acked = summary.last_ack_ms
    counts = summary.counts
    return {
        "agent": summary.agent,
        "vehicle": config.vehicle,
        "buffer": str(path),
        "buffer_bytes": _file_size(path),
        "reserve_present": reserve_path(path).exists(),
        "disk_free_bytes": fs.f_bavail * fs.f_frsize,
        "backlog": counts.pending,
        "backlog_oldest_ts": _iso(summary.oldest_pending_ts_ms),
        "stored": counts.stored,
        "rejected": counts.rejected,
        # of them, refused for a cause that may change: kept, sent again by frota agent replay
        "rejected_retryable": counts.retryable,
        # the collector holds another record under these seqs: kept apart, never resent
        "conflicts": counts.conflicts,
        "last_seq": counts.last_seq,
        "last_ack": _iso(acked),
        "last_ack_s_ago": None if acked is None else round((now - acked) / 1000, 1),
        "agent_status": agent.status if agent else None,
        "agent_status_ts": agent.ts if agent else None,
        "agent_detail": agent.detail if agent else None,
        "devices": devices,
    }


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{human_duration(seconds)} ago"


def render(status: dict[str, Any]) -> str:
    """The status for a person: a few lines."""
    lines = [
        f"agent {status['agent']} for {status['vehicle']}",
        f"buffer   {status['buffer']} ({_size(status['buffer_bytes'])}); disk left "
        f"{_size(status['disk_free_bytes'])}"
        + ("" if status["reserve_present"] else " (reserve file given back: the disk was full)"),
        f"backlog  {status['backlog']} records not yet confirmed"
        + (f" (oldest {status['backlog_oldest_ts']})" if status["backlog_oldest_ts"] else "")
        + f"; {status['stored']} stored, {status['rejected']} rejected "
        f"({status['rejected_retryable']} retryable), "
        f"{status['conflicts']} in conflict; last seq {status['last_seq']}",
        f"last ack {status['last_ack'] or 'none yet'}"
        + (f" ({_ago(status['last_ack_s_ago'])})" if status["last_ack"] else ""),
    ]
    if status["agent_status"]:
        lines.append(
            f"agent    {status['agent_status']} at {status['agent_status_ts']}: {status['agent_detail']}"
        )
    lines.append("devices")
    for dev in status["devices"]:
        health = dev["status"] or "no report yet"
        line = f"  {dev['name']:<12} {dev['device']:<11} {health:<13} last record {_ago(dev['last_record_s_ago'])}"
        if dev["detail"]:
            line += f"  ({dev['status_ts']}: {dev['detail']})"
        lines.append(line)
    if not status["devices"]:
        lines.append("  (none configured)")
    return "\n".join(lines)
