"""The live rules under a steady stream: CPU per evaluation and per arriving record (issue 16,
"the live rules' cost per arriving record"), without MQTT, ingest or simulator beside them.

    python -m bench.live_stream [--buses 2000] [--seconds 60] [--batch-interval 1,5]
        [--postgres DSN] [--repeat 3]

N buses (``frota sim fleet``'s registry and records: speed and position in turn, 1 Hz) each send
a batch every ``batch-interval`` seconds at a phase of their own; second by second the batches
due are stored (``Store.put``, as the ingest does) and the live rules evaluate once
(``LiveRules.evaluate``), as the collector does under a steady stream. The figure is the
evaluator's CPU time (``time.process_time``) per evaluation and per record arrived, over the
last two thirds of the run (the first third warms up). A store in SQLite, or a fresh PostgreSQL
schema with ``--postgres``. Batch intervals are interleaved round by round.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Figure, add_repeat, host_line
from collector import registry as fleet
from collector.live_rules import LiveRules
from collector.rules.profile import load_profiles
from collector.store import open_store, record_row
from frota.harness.postgres import private_schema
from protocols.records import Record, ms_to_ts
from simulators.fleet import registry, vehicle_ids

START_MS = 1_780_000_000_000


def _record(vehicle: str, second: int) -> Record:
    seq = second + 1
    rec: dict[str, Any] = {"vehicle": vehicle, "ts": ms_to_ts(START_MS + second * 1000),
                           "agent": f"pi-{vehicle}", "seq": seq}
    if seq % 2:
        rec.update(kind="speed", kmh=float(40 + seq % 50))
    else:
        rec.update(kind="position", lat=-23.5 + (seq % 1000) * 1e-5, lon=-46.6, kmh=60.0)
    return rec


def _round(url: str, buses: int, seconds: int, interval: int, folder: Path) -> tuple[float, int]:
    """CPU seconds of the measured evaluations per evaluation, and records per evaluation."""
    path = folder / "fleet.json"
    path.write_text(json.dumps(registry(buses)), encoding="utf-8")
    vehicles = vehicle_ids(buses)
    phase = {v: random.randrange(interval) for v in vehicles}
    store = open_store(url)
    try:
        live = LiveRules(store, fleet.load(path), path.read_bytes(), load_profiles())
        spent, evaluations, arrived = 0.0, 0, 0
        for second in range(seconds):
            rows = [record_row(_record(v, k), 0) for v in vehicles
                    if (second - phase[v]) % interval == 0
                    for k in range(max(0, second - interval), second)]
            store.put(rows)
            as_of = START_MS + second * 1000 + 500
            began = time.process_time()
            live.evaluate(as_of, as_of)
            if second >= seconds // 3:
                spent += time.process_time() - began
                evaluations += 1
                arrived += len(rows)
        return spent / evaluations, arrived // evaluations
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--buses", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--batch-interval", default="1,5", metavar="S,S",
                        help="seconds between two batches of a bus, comma-separated")
    parser.add_argument("--postgres", metavar="DSN", help="store in PostgreSQL (fresh schema)")
    add_repeat(parser)
    args = parser.parse_args()
    intervals = [int(s) for s in args.batch_interval.split(",")]
    per_eval: dict[int, list[float]] = {i: [] for i in intervals}
    per_record: dict[int, list[float]] = {i: [] for i in intervals}
    for _ in range(args.repeat):
        for interval in intervals:
            with tempfile.TemporaryDirectory(prefix="bench-live-stream-") as tmp:
                if args.postgres:
                    with private_schema(args.postgres, "bench") as (url, _):
                        cpu, records = _round(url, args.buses, args.seconds, interval, Path(tmp))
                else:
                    cpu, records = _round(str(Path(tmp) / "c.db"), args.buses, args.seconds,
                                          interval, Path(tmp))
            per_eval[interval].append(cpu * 1000)
            per_record[interval].append(cpu * 1e6 / max(records, 1))
    store = "PostgreSQL" if args.postgres else "SQLite"
    print(f"live rules under a steady stream: {args.buses} buses at 1 Hz, one evaluation a second, "
          f"{store}; {args.repeat} interleaved rounds, median (spread), evaluator CPU")
    for interval in intervals:
        print(f"  a batch every {interval} s: {Figure(tuple(per_eval[interval])).show()} ms per "
              f"evaluation, {Figure(tuple(per_record[interval])).show('{:,.1f}')} µs per record "
              "arrived")
    print(host_line())


if __name__ == "__main__":
    main()
