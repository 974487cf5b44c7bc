"""Backlog drain: 24 h of one bus's records in the agent's buffer, delivered to the real collector
and confirmed, against ``mosquitto_pub`` pushing the same batches through the same broker.

    .venv/bin/python -m bench.drain [--records 175000] [--batch 1000] [--in-flight 16] [--repeat 3]

1. About 175,000 realistic records (``bench.busday``: registrador and GPS at 1 Hz with their raw
   frames, door counts) are captured in a fresh agent buffer (not timed).
2. Baseline: the same records in the same batches, as JSON lines, sent by ``mosquitto_pub -l -q 1``
   to a private Mosquitto and counted by ``mosquitto_sub -C`` (fewer than 65,535 messages per run,
   Mosquitto 2.0.11's ``mosquitto_pub -l`` at QoS 1 loses messages past 65,535 lines in one run:
   its message ids wrap). ``-l`` needs one payload per line, so the baseline sends
   uncompressed JSON; the agent sends zstd-compressed JSON (firmware-notes/mqtt.md).
3. The agent's uplink (agent.uplink.Uplink, in this process) drains the buffer to ``frota collector
   run`` (a real process, SQLite with synchronous=FULL), from a fresh copy of the preloaded buffer
   each round; timed until the collector has confirmed every record (the buffer's backlog is
   zero), and until every record is stored *and* evaluated (the collector's live findings
   evaluated at or after that moment). The collector's database is then checked.

Both run ``--repeat`` times (at least 3), interleaved; printed: the median and the spread of the
times and records/s, and the ratio round by round. Target: the drain in ≤ 60 s.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from agent.buffer import Buffer
from agent.config import parse_config
from agent.uplink import Uplink
from bench.busday import VEHICLE, day_of_records
from bench.common import Figure, add_repeat, collector_in, cpu_of, host_line, target
from collector.store import StoreError, open_store
from frota.harness import Mosquitto
from protocols.uplink import encode_batch_json

DAY_RECORDS = 175_000  # 24 h of one bus (bench.busday)


def preload(path: Path, count: int) -> tuple[str, list[str]]:
    """Capture ``count`` records in a new buffer; return the agent id and the stored bodies."""
    path.parent.mkdir(parents=True, exist_ok=True)  # the buffer makes no directory
    buf = Buffer(path)
    items = day_of_records(count)
    for i in range(0, len(items), 10_000):
        buf.add(items[i : i + 10_000])
    bodies = [body for _, body in buf.bodies(1, buf.last_seq())]
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


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _evaluated_since(database: Path, since_ms: int) -> bool:
    """True once the collector's live findings were evaluated at or after ``since_ms`` (its
    clock, this host's): an evaluation that started after every record was committed."""
    try:
        store = open_store(str(database), read_only=True)
    except StoreError:
        return False
    try:
        _, as_of = store.findings()
    except StoreError:
        return False
    finally:
        store.close()
    return as_of is not None and as_of >= since_ms


def drain(
    broker: Mosquitto, folder: Path, template: Path, batch: int, in_flight: int
) -> tuple[float, float, float, float]:
    """(seconds to every record confirmed, seconds to every record stored *and* evaluated by the
    live rules, agent CPU s, collector CPU s), from a fresh copy of the preloaded buffer."""
    buffer = folder / "agent" / "buffer.sqlite"
    buffer.parent.mkdir(parents=True)
    shutil.copyfile(template, buffer)
    collector, database = collector_in(folder / "collector", broker.url, [VEHICLE])
    collector.start()
    config = parse_config(
        {
            "vehicle": VEHICLE,
            "buffer": {"path": str(buffer)},
            "broker": {"url": broker.url, "client_id": f"bench-agent-{folder.name}"},
            "uplink": {"batch_records": batch, "max_in_flight": in_flight, "ack_timeout_s": 60},
        }
    )
    reader = Buffer(buffer)
    uplink = Uplink(config)
    pid = collector.pid
    try:
        cpu0, ccpu0 = _own_cpu(), cpu_of(pid)
        start = time.perf_counter()
        uplink.start()
        total = reader.pending_count()
        # Watch the uplink's own count of confirmed records (no query competing with it), then
        # check the buffer itself.
        while uplink.stats.stored + uplink.stats.rejected < total or reader.pending_count() > 0:
            time.sleep(0.01)
        confirmed = time.perf_counter() - start
        confirmed_ms = time.time_ns() // 1_000_000
        while not _evaluated_since(database, confirmed_ms):
            collector.child.check()
            time.sleep(0.02)
        evaluated = time.perf_counter() - start
        agent_cpu, collector_cpu = _own_cpu() - cpu0, cpu_of(pid) - ccpu0
    finally:
        uplink.stop()
        reader.close()
        collector.stop()
    conn = sqlite3.connect(database)
    (stored,) = conn.execute("SELECT COUNT(*) FROM records WHERE vehicle = ?", (VEHICLE,)).fetchone()
    conn.close()
    counts = Buffer(buffer).counts()
    assert stored == counts.stored == counts.last_seq, (stored, counts)
    return confirmed, evaluated, agent_cpu, collector_cpu


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=DAY_RECORDS)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=16)
    add_repeat(parser)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {k: [] for k in ("pub", "confirmed", "evaluated", "agent",
                                                       "collector")}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        template = folder / "template" / "buffer.sqlite"
        template.parent.mkdir()
        agent, bodies = preload(template, args.records)
        n = len(bodies)
        broker = Mosquitto(folder)
        broker.start()
        try:
            for run in range(args.repeat):  # one baseline and one drain per round: interleaved
                samples["pub"].append(baseline(broker, folder, agent, bodies, args.batch))
                confirmed, evaluated, agent_cpu, collector_cpu = drain(
                    broker, folder / f"run{run}", template, args.batch, args.in_flight
                )
                samples["confirmed"].append(confirmed)
                samples["evaluated"].append(evaluated)
                samples["agent"].append(agent_cpu)
                samples["collector"].append(collector_cpu)
        finally:
            broker.stop()
    fig = {k: Figure(tuple(v)) for k, v in samples.items()}
    print(f"records: {n}  batch: {args.batch}  in flight: {args.in_flight}; {args.repeat} "
          "interleaved rounds, median (spread)")
    print(f"mosquitto_pub (JSON lines, QoS 1):       {fig['pub'].show('{:.2f}')} s  "
          f"{fig['pub'].per(n).show()} records/s")
    print(f"agent → collector, confirmed:            {fig['confirmed'].show('{:.2f}')} s  "
          f"{fig['confirmed'].per(n).show()} records/s")
    stored_evaluated = fig["evaluated"]
    print(f"agent → collector, stored and evaluated: {stored_evaluated.show('{:.2f}')} s  "
          f"{stored_evaluated.per(n).show()} records/s  (the live rules' evaluation included: they "
          "wait for 1 s of quiet)")
    print(f"CPU per drain: agent {fig['agent'].show('{:.1f}')} s, collector "
          f"{fig['collector'].show('{:.1f}')} s")
    print(f"ratio drain (stored and evaluated) / mosquitto_pub time: "
          f"{stored_evaluated.ratio(fig['pub']).show('{:.1f}')}x")
    verdict = (target(stored_evaluated.median <= 60) if n >= DAY_RECORDS
               else f"not judged: {n:,} records, the target is for a day's {DAY_RECORDS:,}")
    print(f"target (firmware-notes/mqtt.md): a day's backlog drained in <= 60 s: {verdict}; "
          "issue 16's drain against thingsboard-gateway's storage is python -m bench.agent_buffer")
    print(host_line())


if __name__ == "__main__":
    main()
