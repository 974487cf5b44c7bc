"""Agent load: CPU seconds and peak RSS of ``frota agent run`` per hour of a simulated bus.

    .venv/bin/python -m bench.agent_load [--scale 60] [--hours 1] [--realtime 20] [--repeat 3]

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
three simulators spent making the traffic (ratio agent ÷ simulators). ``--repeat`` rounds (at
least 3), each a scaled and a real-time bus, interleaved; printed: median and spread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from agent.buffer_summary import BufferReader
from bench.common import Figure, add_repeat, collector_in, cpu_of, host_line, target
from frota.harness import AgentProcess, Mosquitto, SimulatorProcess

VEHICLE = "ABC1D23"
START = "2026-03-02T14:00:00Z"


def _hwm_kib(pid: int) -> int:
    """Peak resident set size of a process (VmHWM, KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _sim(folder: Path, device: str, scale: float, *extra: str) -> SimulatorProcess:
    sim = SimulatorProcess(device, folder / device, "--start", START, "--time-scale", str(scale),
                           "--seed", "1", "--baud", "0", *extra)
    sim.start()
    sim.wait_ready()
    return sim


def _config(folder: Path, broker_url: str, links: dict[str, Path], scale: float) -> Path:
    tachograph = (  # the tachograph on its serial line, or on the FMS CAN bus (an SLCAN adapter)
        f'[[devices]]\nname = "fms"\nprotocol = "fms"\nport = "{links["fms"]}"\nopen_wait_s = 0\n'
        if "fms" in links else
        f'[[devices]]\nname = "registrador"\nprotocol = "registrador"\nport = "{links["registrador"]}"\n'
    )
    text = (
        f'vehicle = "{VEHICLE}"\n[buffer]\npath = "buffer.sqlite"\n'
        f'[broker]\nurl = "{broker_url}"\nclient_id = "bench-agent"\n'
        f"{tachograph}"
        f'[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "{links["gps"]}"\nbaudrate = 9600\n'
        f'[[devices]]\nname = "doors"\nprotocol = "apc"\nport = "{links["apc"]}"\nbaudrate = 19200\n'
        f"poll_interval_s = {1.0 / scale}\n"
    )
    for address in range(1, 5):
        text += f"[[devices.counters]]\naddress = {address}\n"
    path = folder / "agent.toml"
    path.write_text(text)
    return path


def run_bus(folder: Path, broker: Mosquitto, scale: float, seconds: float,
            tachograph: str = "registrador") -> dict[str, float]:
    """Play the bus at ``scale`` for ``seconds`` of real time; the agent's and simulators' figures.

    ``tachograph="fms"``: the tachograph on the FMS CAN bus instead (``frota sim fms``, TCO1 at
    the standard's 20 Hz, through an SLCAN adapter read by the agent with python-can)."""
    folder.mkdir(parents=True)
    collector, _ = collector_in(folder / "collector", broker.url, [VEHICLE])
    collector.start()
    sims = {
        tachograph: _sim(folder, "fms", scale, "--tco1-hz", "20") if tachograph == "fms"
        else _sim(folder, "registrador", scale),
        "gps": _sim(folder, "gps", scale),
        "apc": _sim(folder, "apc", scale, "--doors", "4"),
    }
    agent = AgentProcess(_config(folder, broker.url, {k: v.link for k, v in sims.items()}, scale))
    agent.start()
    try:
        time.sleep(2.0)  # imports and opening the lines: not part of an hour on the bus
        cpu0 = cpu_of(agent.pid)
        sim0 = sum(cpu_of(p.pid) for p in sims.values())
        start = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - start
        cpu = cpu_of(agent.pid) - cpu0
        sim_cpu = sum(cpu_of(p.pid) for p in sims.values()) - sim0
        hwm = _hwm_kib(agent.pid)
        agent.child.check()
    finally:
        agent.stop()
        collector.stop()
        for sim in sims.values():
            sim.stop()
    with BufferReader(folder / "buffer.sqlite") as buffer:
        records = buffer.counts().last_seq
    return {"wall": wall, "cpu": cpu, "sim_cpu": sim_cpu, "hwm_kib": hwm,
            "device_s": wall * scale, "records": float(records)}


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=60.0, help="time scale (default 60)")
    parser.add_argument("--hours", type=float, default=1.0, help="device hours (default 1)")
    parser.add_argument("--realtime", type=float, default=20.0,
                        help="seconds of the bus at 1× for the direct share (default 20; 0 = skip)")
    add_repeat(parser)
    args = parser.parse_args()
    scaled_runs: list[dict[str, float]] = []
    real_runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        broker = Mosquitto(folder)
        broker.start()
        try:
            for run in range(args.repeat):  # one scaled and one real-time bus per round
                scaled_runs.append(run_bus(folder / f"scaled{run}", broker, args.scale,
                                           args.hours * 3600 / args.scale))
                if args.realtime > 0:
                    real_runs.append(run_bus(folder / f"real{run}", broker, 1.0, args.realtime))
        finally:
            broker.stop()

    def fig(runs: list[dict[str, float]], key: str) -> Figure:
        return Figure(tuple(r[key] for r in runs))

    share = Figure(tuple(r["cpu"] / r["device_s"] for r in scaled_runs))  # CPU s per device s
    rss_mib = fig(scaled_runs, "hwm_kib").scaled(1 / 1024)
    sim_x = Figure(tuple(r["cpu"] / max(r["sim_cpu"], 1e-9) for r in scaled_runs))
    print(f"simulated: {args.hours:.2f} h of one bus at {args.scale:g}× per run, {args.repeat} "
          f"interleaved rounds, median (spread); {fig(scaled_runs, 'records').show()} records "
          "captured per run")
    print(f"agent CPU per simulated hour: {share.scaled(3600).show('{:.1f}')} s = "
          f"{share.scaled(100).show('{:.2f}')} % of one core   "
          f"(target <= 1 %: {target(share.median <= 0.01)})")
    print(f"agent peak RSS: {rss_mib.show('{:.1f}')} MiB   "
          f"(target <= 80 MB: {target(rss_mib.median * 1024 * 1024 <= 80e6)})")
    print(f"baseline, the simulators making the traffic: {fig(scaled_runs, 'sim_cpu').show('{:.2f}')}"
          f" s CPU; agent ÷ simulators = {sim_x.show('{:.2f}')}x")
    if real_runs:
        real_share = Figure(tuple(r["cpu"] / r["wall"] for r in real_runs)).scaled(100)
        print(f"at 1× for {args.realtime:.0f} s: agent CPU {real_share.show('{:.2f}')} % of one "
              f"core; peak RSS {fig(real_runs, 'hwm_kib').scaled(1 / 1024).show('{:.1f}')} MiB")
    print(host_line())


if __name__ == "__main__":
    main()
