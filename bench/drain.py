"""Backlog drain: 24 h of one bus's records in the agent's buffer, delivered to the real collector
and confirmed, against ``mosquitto_pub`` pushing the same batches through the same broker.

    .venv/bin/python -m bench.drain [--records 175000] [--batch 1000] [--in-flight 16]

1. About 175,000 realistic records (``bench.busday``: registrador and GPS at 1 Hz with their raw
   frames, door counts) are captured in a fresh agent buffer (not timed).
2. Baseline: the same records in the same batches, as JSON lines, sent by ``mosquitto_pub -l -q 1``
   to a private Mosquitto and counted by ``mosquitto_sub -C`` (fewer than 65,535 messages per run,
   Mosquitto 2.0.11's ``mosquitto_pub -l`` at QoS 1 loses messages past 65,535 lines in one run:
   its message ids wrap). ``-l`` needs one payload per line, so the baseline sends
   uncompressed JSON; the agent sends zstd-compressed JSON (firmware-notes/mqtt.md).
3. The agent's uplink (agent.uplink.Uplink, in this process) drains the buffer to ``frota collector
   run`` (a real process, SQLite with synchronous=FULL); timed until the collector has confirmed
   every record (the buffer's backlog is zero). The collector's database is then checked.

Prints records/s for both and the ratio. Target: the drain in ≤ 60 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from agent.buffer import Buffer
from agent.config import parse_config
from agent.uplink import Uplink
from bench.busday import VEHICLE, day_of_records
from protocols.uplink import encode_batch_json
from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto


def preload(path: Path, count: int) -> tuple[str, list[str]]:
    """Capture ``count`` records in a new buffer; return the agent id and the stored bodies."""
    path.parent.mkdir(parents=True, exist_ok=True)  # the buffer makes no directory
    buf = Buffer(path)
    items = day_of_records(count)
    for i in range(0, len(items), 10_000):
        buf.add(items[i : i + 10_000])
    bodies = [str(b) for (b,) in buf.conn.execute("SELECT body FROM records ORDER BY seq")]
    agent = buf.agent
    buf.close()
    return agent, bodies


def baseline(broker: Mosquitto, folder: Path, agent: str, bodies: list[str], batch: int) -> float:
    """Seconds for mosquitto_pub to get the same batches (JSON lines) to a subscriber."""
    lines = folder / "batches.jsonl"
    with lines.open("wb") as out:
        for i in range(0, len(bodies), batch):
            out.write(encode_batch_json(VEHICLE, agent, bodies[i : i + batch], compress=False) + b"\n")
    messages = (len(bodies) + batch - 1) // batch
    assert messages < 65_535
    port = str(broker.port)
    sub = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", port, "-q", "1", "-t", "bench/up",
         "-C", str(messages)],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # let the subscription settle before the clock starts
    start = time.perf_counter()
    with lines.open("rb") as stdin:
        pub = subprocess.run(
            ["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-q", "1", "-t", "bench/up", "-l"],
            stdin=stdin,
            check=True,
        )
    assert pub.returncode == 0
    sub.wait(timeout=300)
    return time.perf_counter() - start


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def drain(
    broker: Mosquitto, folder: Path, buffer: Path, batch: int, in_flight: int
) -> tuple[float, float, float]:
    """(seconds, agent CPU s, collector CPU s) to get every record confirmed by the collector."""
    (folder / "collector").mkdir()
    collector = CollectorProcess(folder / "collector", broker.url)
    collector.start()
    config = parse_config(
        {
            "vehicle": VEHICLE,
            "buffer": {"path": str(buffer)},
            "broker": {"url": broker.url, "client_id": "bench-agent"},
            "uplink": {"batch_records": batch, "max_in_flight": in_flight, "ack_timeout_s": 60},
        }
    )
    reader = Buffer(buffer)
    uplink = Uplink(config)
    assert collector.proc is not None
    pid = collector.proc.pid
    try:
        cpu0, ccpu0 = _own_cpu(), _cpu_of(pid)
        start = time.perf_counter()
        uplink.start()
        total = reader.pending_count()
        # Watch the uplink's own count of confirmed records (no query competing with it), then
        # check the buffer itself.
        while uplink.stats.stored + uplink.stats.rejected < total or reader.pending_count() > 0:
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
        agent_cpu, collector_cpu = _own_cpu() - cpu0, _cpu_of(pid) - ccpu0
    finally:
        uplink.stop()
        reader.close()
        collector.stop()
    conn = sqlite3.connect(collector.db)
    (stored,) = conn.execute("SELECT COUNT(*) FROM records WHERE vehicle = ?", (VEHICLE,)).fetchone()
    conn.close()
    counts = Buffer(buffer).counts()
    assert stored == counts.stored == counts.last_seq, (stored, counts)
    return elapsed, agent_cpu, collector_cpu


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=175_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        buffer = folder / "agent" / "buffer.sqlite"
        agent, bodies = preload(buffer, args.records)
        n = len(bodies)
        broker = Mosquitto(folder)
        broker.start()
        try:
            t_pub = baseline(broker, folder, agent, bodies, args.batch)
            t_drain, agent_cpu, collector_cpu = drain(
                broker, folder, buffer, args.batch, args.in_flight
            )
        finally:
            broker.stop()
    print(f"records: {n}  batch: {args.batch}  in flight: {args.in_flight}")
    print(f"mosquitto_pub (JSON lines, QoS 1): {t_pub:7.2f} s  {n / t_pub:10,.0f} records/s")
    print(f"agent → collector, confirmed:      {t_drain:7.2f} s  {n / t_drain:10,.0f} records/s")
    print(f"CPU during the drain: agent {agent_cpu:.1f} s, collector {collector_cpu:.1f} s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"ratio drain/mosquitto_pub time: {t_drain / t_pub:.1f}×   target: drain ≤ 60 s "
          f"({'met' if t_drain <= 60 else 'NOT met'})")


if __name__ == "__main__":
    main()
