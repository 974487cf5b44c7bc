"""Agent load: CPU seconds and peak RSS of ``frota agent run`` per hour of a simulated bus.

    .venv/bin/python -m bench.agent_load [--scale 60] [--hours 1] [--realtime 20]

One bus: the registrador at 1 Hz, the GPS at 1 Hz (``frota sim registrador|gps``) and four door
counters on one RS-485 line (``frota sim apc --doors 4``), each on its own pty (unpaced: at 60× the GPS's NMEA would not fit 9600 baud), played at
``--scale`` × real time for ``--hours`` device hours. The agent (a real process, the production
defaults of firmware-notes/agent-config.md) reads them and ships every record through a private
Mosquitto to ``frota collector run``. The door line is polled as often per *device* second as on
a bus (``poll_interval_s`` = 1 s ÷ scale, the default at 1×), so the polling load scales with the others.

Measured from /proc: the agent's user+system CPU seconds over the run (up to its stop) and its
peak RSS (VmHWM). The figure is CPU per simulated hour ÷ 3600 s, as a share of one core in real
time (target ≤ 1 %), and peak RSS (target ≤ 80 MB). The agent's per-real-second costs (its 1 s
main loop, MQTT keepalive) are compressed by the scale, so ``--realtime N`` also runs the same
bus at 1× for N seconds and reports that share directly. Baseline in the same run: the CPU the
three simulators spent making the traffic (ratio agent ÷ simulators).
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.drain import _cpu_of
from tests.collector.helpers import CollectorProcess
from tests.services import PROJECT, Mosquitto, stop_process

VEHICLE = "ABC1D23"
START = "2026-03-02T14:00:00Z"


def _hwm_kib(pid: int) -> int:
    """Peak resident set size of a process (VmHWM, KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _sim(folder: Path, device: str, scale: float, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    link = folder / device
    proc = subprocess.Popen(
        [sys.executable, "-m", "frota", "sim", device, "--link", str(link), "--start", START,
         "--time-scale", str(scale), "--seed", "1", "--baud", "0", *extra],
        cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not link.exists():
        assert proc.poll() is None, f"the {device} simulator died"
        assert time.monotonic() < deadline, f"no pty for {device}"
        time.sleep(0.02)
    return proc, link


def _config(folder: Path, broker_url: str, links: dict[str, Path], scale: float) -> Path:
    text = (
        f'vehicle = "{VEHICLE}"\n[buffer]\npath = "buffer.sqlite"\n'
        f'[broker]\nurl = "{broker_url}"\nclient_id = "bench-agent"\n'
        f'[[devices]]\nname = "registrador"\nprotocol = "registrador"\nport = "{links["registrador"]}"\n'
        f'[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "{links["gps"]}"\nbaudrate = 9600\n'
        f'[[devices]]\nname = "doors"\nprotocol = "apc"\nport = "{links["apc"]}"\nbaudrate = 19200\n'
        f"poll_interval_s = {1.0 / scale}\n"
    )
    for address in range(1, 5):
        text += f"[[devices.counters]]\naddress = {address}\n"
    path = folder / "agent.toml"
    path.write_text(text)
    return path


def run_bus(folder: Path, broker: Mosquitto, scale: float, seconds: float) -> dict[str, float]:
    """Play the bus at ``scale`` for ``seconds`` of real time; the agent's and simulators' figures."""
    folder.mkdir(parents=True)
    (folder / "collector").mkdir()
    collector = CollectorProcess(folder / "collector", broker.url)
    collector.start()
    sims: dict[str, tuple[subprocess.Popen[bytes], Path]] = {
        "registrador": _sim(folder, "registrador", scale),
        "gps": _sim(folder, "gps", scale),
        "apc": _sim(folder, "apc", scale, "--doors", "4"),
    }
    config = _config(folder, broker.url, {k: v[1] for k, v in sims.items()}, scale)
    with (folder / "agent.log").open("wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "frota", "agent", "run", "--config", str(config)],
            cwd=PROJECT, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        time.sleep(2.0)  # imports and opening the lines: not part of an hour on the bus
        cpu0 = _cpu_of(agent.pid)
        sim0 = sum(_cpu_of(p.pid) for p, _ in sims.values())
        start = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - start
        cpu = _cpu_of(agent.pid) - cpu0
        sim_cpu = sum(_cpu_of(p.pid) for p, _ in sims.values()) - sim0
        hwm = _hwm_kib(agent.pid)
        assert agent.poll() is None, (folder / "agent.log").read_text()
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
        collector.stop()
        for proc, _ in sims.values():
            stop_process(proc, signal.SIGINT, 10)
    conn = sqlite3.connect(folder / "buffer.sqlite")
    kinds = dict(conn.execute("SELECT kind, COUNT(*) FROM records GROUP BY kind").fetchall())
    conn.close()
    return {"wall": wall, "cpu": cpu, "sim_cpu": sim_cpu, "hwm_kib": hwm,
            "device_s": wall * scale, "records": float(sum(kinds.values()))}


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=60.0, help="time scale (default 60)")
    parser.add_argument("--hours", type=float, default=1.0, help="device hours (default 1)")
    parser.add_argument("--realtime", type=float, default=20.0,
                        help="seconds of the bus at 1× for the direct share (default 20; 0 = skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        broker = Mosquitto(folder)
        broker.start()
        try:
            scaled = run_bus(folder / "scaled", broker, args.scale, args.hours * 3600 / args.scale)
            real = run_bus(folder / "real", broker, 1.0, args.realtime) if args.realtime > 0 else None
        finally:
            broker.stop()
    per_hour = scaled["cpu"] * 3600 / scaled["device_s"]
    share = per_hour / 3600
    print(f"simulated: {scaled['device_s'] / 3600:.2f} h of one bus at {args.scale:g}× in "
          f"{scaled['wall']:.0f} s; {scaled['records']:.0f} records captured")
    print(f"agent CPU: {scaled['cpu']:.2f} s → {per_hour:.1f} s per simulated hour = "
          f"{share:.2%} of one core   (target ≤ 1 %: {'met' if share <= 0.01 else 'NOT met'})")
    print(f"agent peak RSS: {scaled['hwm_kib'] / 1024:.1f} MiB   "
          f"(target ≤ 80 MB: {'met' if scaled['hwm_kib'] * 1024 <= 80e6 else 'NOT met'})")
    print(f"baseline, the simulators making the traffic: {scaled['sim_cpu']:.2f} s CPU; "
          f"agent ÷ simulators = {scaled['cpu'] / max(scaled['sim_cpu'], 1e-9):.2f}×")
    if real is not None:
        print(f"at 1× for {real['wall']:.0f} s: agent CPU {real['cpu']:.2f} s = "
              f"{real['cpu'] / real['wall']:.2%} of one core; peak RSS {real['hwm_kib'] / 1024:.1f} MiB")
    print(f"(host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
