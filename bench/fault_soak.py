"""A long fault-injection run of the whole data path (issue 11): nothing lost, nothing twice.

    .venv/bin/python -m bench.fault_soak [--minutes 30] [--time-scale 10] [--kills 20] [--ber 1e-3]

Real processes: ``frota sim registrador`` (bit errors at ``--ber`` on everything it sends, 1 %
garbage), ``frota sim gps`` and ``frota sim apc`` (two doors, 1 % garbage) on ptys, each with its
``--sent-log``; a private Mosquitto; ``frota collector run``; ``frota agent run``, SIGKILLed
``--kills`` times at seeded random moments and restarted at once; the broker and the collector
each SIGKILLed and restarted 3 times among the kills. After ``--minutes`` of device time the
devices keep talking until the collector holds every registrador frame made so far (or 10
minutes pass); then the agent is stopped with SIGTERM and the figures are printed:

- registrador frames made (live, per its sent-log), stored at the collector, lost, stored twice;
- the agent's seqs at the collector: gaps (a frame captured twice shows as one);
- door passengers counted by the sensors (their last answers) against the collector's sums;
- the agent's ``device`` records naming frames lost (the registrador no longer held them).

Not a test (it takes ~10 minutes); the suite's short versions are in tests/agent/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocols.apc.frames import HEADER_SIZE, parse_counts
from tests.agent.process import AgentProcess, write_agent_config
from tests.collector.helpers import CollectorProcess
from tests.services import PROJECT, Mosquitto, stop_process

START = "2026-03-02T14:00:00Z"


class Sim:
    """One ``frota sim`` process with its sent-log."""

    def __init__(self, folder: Path, device: str, *args: str) -> None:
        self.link = folder / device
        self.sent = folder / f"{device}.sent.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "frota", "sim", device, "--link", str(self.link),
             "--sent-log", str(self.sent), "--start", START, *args],
            cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not self.link.exists():
            if self.proc.poll() is not None:
                raise SystemExit(f"frota sim {device} did not start")
            time.sleep(0.05)

    def entries(self) -> list[dict[str, object]]:
        """The sent-log so far."""
        return [json.loads(line) for line in self.sent.read_text().splitlines() if line]

    def stop(self) -> None:
        """SIGINT, then wait."""
        stop_process(self.proc, signal.SIGINT, 15)


def live_frames(reg: Sim) -> list[int]:
    """Frame numbers the registrador made and sent live (history answers have string labels)."""
    return [int(str(e["label"])) for e in reg.entries() if isinstance(e["label"], int)]


def door_totals(apc: Sim) -> tuple[int, int]:
    """Passengers in and out the sensors counted: their last answers (they count from 0)."""
    last: dict[int, tuple[int, int]] = {}
    for entry in apc.entries():
        frame = bytes.fromhex(str(entry["hex"]))
        if len(frame) > 2 and frame[2] == 0x81:
            counts = parse_counts(frame[HEADER_SIZE:-2])
            last[frame[1]] = (counts.entered, counts.exited)
    return sum(i for i, _ in last.values()), sum(o for _, o in last.values())


def collector_figures(db: Path) -> dict[str, object]:
    """What the collector holds: frames (and how many twice), seqs, door sums, loss records."""
    conn = sqlite3.connect(db)
    try:
        frames = dict(conn.execute(  # speed records per frame: 1 per status frame, 0 per event
            "SELECT device_seq, SUM(kind = 'speed') FROM records WHERE device_seq IS NOT NULL "
            "GROUP BY device_seq").fetchall())
        seqs = [int(s) for (s,) in conn.execute("SELECT seq FROM records ORDER BY seq")]
        boarded, alighted = conn.execute(
            "SELECT COALESCE(SUM(json_extract(record, '$.boarded')), 0), "
            "COALESCE(SUM(json_extract(record, '$.alighted')), 0) FROM records "
            "WHERE kind = 'door'").fetchone()
        lost = [str(r) for (r,) in conn.execute(
            "SELECT json_extract(record, '$.detail') FROM records WHERE kind = 'device' "
            "AND json_extract(record, '$.detail') LIKE 'registrador frames %lost%'")]
    finally:
        conn.close()
    gaps = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
    return {"frames": frames, "seqs": seqs, "gaps": gaps, "boarded": int(boarded),
            "alighted": int(alighted), "lost_records": lost}


def main() -> None:
    """Run the soak and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="device minutes (30)")
    parser.add_argument("--time-scale", type=float, default=10.0, help="device clock speed (10)")
    parser.add_argument("--kills", type=int, default=20, help="agent SIGKILLs (20)")
    parser.add_argument("--ber", type=float, default=1e-3, help="registrador bit errors (1e-3)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    wall_s = args.minutes * 60 / args.time_scale
    scale = ["--time-scale", str(args.time_scale)]
    with tempfile.TemporaryDirectory(prefix="frota-soak-") as tmp:
        folder = Path(tmp)
        broker = Mosquitto(folder)
        broker.start()
        (folder / "collector").mkdir()
        collector = CollectorProcess(folder / "collector", broker.url)
        collector.start()
        reg = Sim(folder, "registrador", *scale, "--ber", str(args.ber), "--garbage", "0.01",
                  "--seed", str(args.seed))
        gps = Sim(folder, "gps", *scale, "--garbage", "0.01", "--seed", str(args.seed + 1))
        apc = Sim(folder, "apc", *scale, "--doors", "2", "--stop-every", "60", "--dwell", "20",
                  "--garbage", "0.01", "--seed", str(args.seed + 2))
        agent = AgentProcess(write_agent_config(
            folder / "agent", broker.url, registrador=str(reg.link), gps=str(gps.link),
            apc=str(apc.link), doors=2))
        started = time.monotonic()
        agent.start()
        kill_at = sorted(rng.uniform(2.0, wall_s - 2.0) for _ in range(args.kills))
        outages = sorted(rng.sample(range(len(kill_at)), min(6, len(kill_at))))
        kills = broker_kills = collector_kills = 0
        try:
            for i, at in enumerate(kill_at):
                time.sleep(max(0.0, started + at - time.monotonic()))
                agent.kill()
                agent.start()
                kills += 1
                if i in outages:  # the broker, then the collector, in turns
                    if broker_kills <= collector_kills:
                        os.kill(broker.pid, signal.SIGKILL)
                        broker.stop()  # reaps it
                        time.sleep(rng.uniform(0.5, 3.0))
                        broker.start()
                        broker_kills += 1
                    else:
                        collector.stop(signal.SIGKILL)
                        time.sleep(rng.uniform(0.5, 3.0))
                        collector.start()
                        collector_kills += 1
            time.sleep(max(0.0, started + wall_s - time.monotonic()))
            made_until = max(live_frames(reg))
            drain_started = time.monotonic()
            while time.monotonic() - drain_started < 600:
                held = collector_figures(collector.db)["frames"]
                assert isinstance(held, dict)
                if all(n in held for n in range(1, made_until + 1)):
                    break
                time.sleep(1.0)
            drain_s = time.monotonic() - drain_started
            time.sleep(2.0)
            status = agent.stop()
            apc.stop()
            time.sleep(1.0)
            deadline = time.monotonic() + 60
            while agent.count("state = 0") and time.monotonic() < deadline:
                agent.start()  # a last start to upload what the stop left (door counts)
                time.sleep(3.0)
                agent.stop()
        finally:
            if agent.proc is not None:
                agent.stop()
            for sim in (reg, gps, apc):
                if sim.proc.poll() is None:
                    sim.stop()
            collector.stop()
            broker.stop()
        figures = collector_figures(collector.db)
        frames = figures["frames"]
        assert isinstance(frames, dict)
        made = set(range(1, made_until + 1))
        stored = made & set(frames)
        twice = sorted(n for n, c in frames.items() if c > 1)
        counted_in, counted_out = door_totals(apc)
        seqs = figures["seqs"]
        assert isinstance(seqs, list)
        print(f"fault soak: {args.minutes:g} device minutes at {args.time_scale:g}x "
              f"({wall_s:.0f} s), registrador BER {args.ber:g} + 1 % garbage, seed {args.seed}")
        print(f"  agent SIGKILLs {kills}, broker SIGKILLs {broker_kills}, collector SIGKILLs "
              f"{collector_kills}; catch-up after the last device minute took {drain_s:.0f} s; "
              f"last agent stop status {status}")
        print(f"  registrador frames made 1-{made_until}: {len(made)}; stored at the collector "
              f"{len(stored)}; lost {len(made - stored)} {sorted(made - stored)[:20]}; "
              f"stored twice {len(twice)} {twice[:20]}")
        print(f"  agent seqs at the collector: {len(seqs)}, gaps {len(figures['gaps'])} "  # type: ignore[arg-type]
              f"{figures['gaps'][:20]}")  # type: ignore[index]
        print(f"  doors: sensors counted {counted_in} in / {counted_out} out; the collector "
              f"holds {figures['boarded']} boarded / {figures['alighted']} alighted")
        print(f"  device records naming frames lost: {figures['lost_records'] or 'none'}")
        print("  target: lost 0, stored twice 0, seq gaps 0, door counts equal")


if __name__ == "__main__":
    main()
