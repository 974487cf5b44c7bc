"""``frota agent status``: what the agent's buffer says, read without disturbing the agent.

The buffer is opened read-only (WAL: the running agent keeps writing). Shown: the backlog (records
the collector has not confirmed), the last acknowledgement, each configured device's health (its
latest ``device`` record and how long since it last gave a record) and the disk left. Times
"ago" are by the host clock (diagnostics, as ``captured_ms``/``acked_ms`` are); record times
are device times.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent import hostclock
from agent.config import AgentConfig
from agent.diskroom import reserve_path

#: How many of the newest records are scanned for each device's latest one (then one query each).
RECENT = 5000


class StatusError(RuntimeError):
    """The buffer cannot be read (missing, not a buffer)."""


def _now_ms() -> int:
    return hostclock.wall_ms()


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _open(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise StatusError(f"no buffer at {path} (has the agent run with this configuration?)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        conn.execute("SELECT value FROM meta WHERE key = 'agent'").fetchone()
    except sqlite3.Error as err:
        raise StatusError(f"cannot read the buffer {path}: {err}") from err
    return conn


def _file_size(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += path.with_name(path.name + suffix).stat().st_size
        except OSError:
            continue
    return total


def _last_captured(conn: sqlite3.Connection, sources: list[str]) -> dict[str, int | None]:
    """Per source, the host time its newest record was captured (ms), or None."""
    recent = dict(
        conn.execute(
            "SELECT source, MAX(captured_ms) FROM (SELECT source, captured_ms FROM records "
            "ORDER BY seq DESC LIMIT ?) GROUP BY source",
            (RECENT,),
        ).fetchall()
    )
    out: dict[str, int | None] = {}
    for source in sources:
        if source in recent:
            out[source] = int(recent[source])
            continue
        row = conn.execute(
            "SELECT captured_ms FROM records WHERE source = ? ORDER BY seq DESC LIMIT 1", (source,)
        ).fetchone()
        out[source] = None if row is None else int(row[0])
    return out


def _latest_device_records(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """The newest ``device`` record per ``device`` value (registrador, gps, apc, agent)."""
    rows = conn.execute(
        "SELECT json_extract(body, '$.device'), json_extract(body, '$.status'), "
        "json_extract(body, '$.ts'), json_extract(body, '$.detail'), captured_ms FROM records "
        "WHERE seq IN (SELECT MAX(seq) FROM records WHERE kind = 'device' "
        "GROUP BY json_extract(body, '$.device'))"
    ).fetchall()
    return {
        str(device): {"status": status, "ts": ts, "detail": detail, "captured_ms": captured}
        for device, status, ts, detail, captured in rows
    }


def collect(config: AgentConfig, now_ms: int | None = None) -> dict[str, Any]:
    """The status as plain data (what ``--json`` prints)."""
    now = _now_ms() if now_ms is None else now_ms
    path = config.buffer.path
    conn = _open(path)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key NOT LIKE 'state:%'"))
        by_state = dict(conn.execute("SELECT state, COUNT(*) FROM records GROUP BY state"))
        oldest_pending = conn.execute(
            "SELECT ts_ms FROM records WHERE state = 0 ORDER BY seq LIMIT 1"
        ).fetchone()
        (acked,) = conn.execute("SELECT MAX(acked_ms) FROM records").fetchone()
        captured = _last_captured(conn, [d.name for d in config.devices])
        latest = _latest_device_records(conn)
    except sqlite3.Error as err:
        raise StatusError(f"cannot read the buffer {path}: {err}") from err
    finally:
        conn.close()
    fs = os.statvfs(path.parent)
    devices = []
    for device in config.devices:
        health = latest.get(device.device, {})
        last = captured.get(device.name)
        devices.append(
            {
                "name": device.name,
                "device": device.device,
                "port": device.port,
                "status": health.get("status"),
                "status_ts": health.get("ts"),
                "detail": health.get("detail"),
                "last_record_s_ago": None if last is None else round((now - last) / 1000, 1),
            }
        )
    agent = latest.get("agent", {})
    return {
        "agent": meta.get("agent"),
        "vehicle": config.vehicle,
        "buffer": str(path),
        "buffer_bytes": _file_size(path),
        "reserve_present": reserve_path(path).exists(),
        "disk_free_bytes": fs.f_bavail * fs.f_frsize,
        "backlog": int(by_state.get(0, 0)),
        "backlog_oldest_ts": None if oldest_pending is None else _iso(int(oldest_pending[0])),
        "stored": int(by_state.get(1, 0)),
        "rejected": int(by_state.get(2, 0)),
        "last_seq": int(meta.get("last_seq", 0)),
        "last_ack": _iso(None if acked is None else int(acked)),
        "last_ack_s_ago": None if acked is None else round((now - int(acked)) / 1000, 1),
        "agent_status": agent.get("status"),
        "agent_status_ts": agent.get("ts"),
        "agent_detail": agent.get("detail"),
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
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def render(status: dict[str, Any]) -> str:
    """The status for a person: a few lines."""
    lines = [
        f"agent {status['agent']} for {status['vehicle']}",
        f"buffer   {status['buffer']} ({_size(status['buffer_bytes'])}); disk left "
        f"{_size(status['disk_free_bytes'])}"
        + ("" if status["reserve_present"] else " (reserve file given back: the disk was full)"),
        f"backlog  {status['backlog']} records not yet confirmed"
        + (f" (oldest {status['backlog_oldest_ts']})" if status["backlog_oldest_ts"] else "")
        + f"; {status['stored']} stored, {status['rejected']} rejected; last seq {status['last_seq']}",
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
