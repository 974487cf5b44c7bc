"""The live rules under a steady stream: CPU per evaluation and per arriving record (issue 16,
"the live rules' cost per arriving record"), without MQTT, ingest or simulator beside them.

    python -m bench.live_stream [--buses 2000] [--seconds 60] [--batch-interval 1,5]
        [--timing staggered,aligned] [--postgres DSN] [--repeat 3]

N buses (``frota sim fleet``'s registry and records: speed and position in turn, 1 Hz) each send
a batch every ``batch-interval`` seconds; second by second the batches due are stored
(``Store.put``, as the ingest does) and the live rules evaluate once (``LiveRules.evaluate``,
``as_of`` half a second into the second), as the collector does under a steady stream. Two
timings: **staggered** is ``frota sim fleet``'s — bus i of N makes its records at i/N of each
second and sends its batch at i/N of each batch interval, so at every evaluation some buses'
records of the last interval are still on their way (the settling delay, docs/collector.md);
**aligned** is this bench's first timing — every record on the whole second, each bus's batch
(the interval's records) at a whole second of its own, a batch a second all at once. The figure
is the evaluator's CPU time (``time.process_time``) per evaluation and per record arrived, over
the last two thirds of the run (the first third warms up). A store in SQLite, or a fresh
PostgreSQL schema with ``--postgres``. The cases are interleaved round by round. Issue 16's
target for this figure (the live rules' cost per arriving record beside the ingest's): well
below 60 µs per record at 1 s batches (docs/deployment.md).
"""

from __future__ import annotations

import argparse
import json
import math
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
TIMINGS = ("staggered", "aligned")
#: The issue's target for the evaluator's CPU per arriving record at 1 s batches (µs).
TARGET_US = 60.0


def _record(vehicle: str, k: int, offset_ms: int = 0) -> Record:
    """Bus ``vehicle``'s k-th record (k from 0), made ``offset_ms`` into second k."""
    seq = k + 1
    rec: dict[str, Any] = {"vehicle": vehicle, "ts": ms_to_ts(START_MS + k * 1000 + offset_ms),
                           "agent": f"pi-{vehicle}", "seq": seq}
    if seq % 2:
        rec.update(kind="speed", kmh=float(40 + seq % 50))
    else:
        rec.update(kind="position", lat=-23.5 + (seq % 1000) * 1e-5, lon=-46.6, kmh=60.0)
    return rec


def _aligned(vehicles: list[str], interval: int) -> Any:
    """Second s's batches: every bus whose phase (a whole second of the interval) is due sends
    the records of the last ``interval`` seconds, all on whole seconds."""
    phase = {v: random.randrange(interval) for v in vehicles}

    def due(second: int) -> list[Record]:
        return [_record(v, k) for v in vehicles if (second - phase[v]) % interval == 0
                for k in range(max(0, second - interval), second)]
    return due


def _staggered(vehicles: list[str], interval: int) -> Any:
    """``frota sim fleet``'s timing: bus i of N makes a record at i/N of each second and sends
    every ``interval`` s, at i/N of the interval, the records made since its last batch; the
    batches sent up to each evaluation's ``as_of`` (half a second into the second) are due."""
    count = len(vehicles)
    period = interval * 1000
    offsets = [i * 1000 // count for i in range(count)]
    phases = [i * period // count for i in range(count)]

    def due(second: int) -> list[Record]:
        lo, hi = (second - 1) * 1000 + 500, second * 1000 + 500   # (lo, hi] after START_MS
        out: list[Record] = []
        for v, off, ph in zip(vehicles, offsets, phases, strict=True):
            for j in range(math.floor((lo - ph) / period) + 1, math.floor((hi - ph) / period) + 1):
                sent = ph + j * period
                # records made in (sent - period, sent]: k * 1000 + off in that range
                first = max(0, math.floor((sent - period - off) / 1000) + 1)
                last = math.floor((sent - off) / 1000)
                out += [_record(v, k, off) for k in range(first, last + 1)]
        return out
    return due


def _round(url: str, buses: int, seconds: int, interval: int, timing: str,
           folder: Path) -> tuple[float, int]:
    """CPU seconds of the measured evaluations per evaluation, and records per evaluation."""
    path = folder / "fleet.json"
    path.write_text(json.dumps(registry(buses)), encoding="utf-8")
    vehicles = vehicle_ids(buses)
    due = (_staggered if timing == "staggered" else _aligned)(vehicles, interval)
    store = open_store(url)
    try:
        live = LiveRules(store, fleet.load(path), path.read_bytes(), load_profiles())
        spent, evaluations, arrived = 0.0, 0, 0
        for second in range(seconds):
            rows = [record_row(rec, 0) for rec in due(second)]
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
    parser.add_argument("--timing", default=",".join(TIMINGS), metavar="T,T",
                        help="staggered (frota sim fleet's) and/or aligned, comma-separated")
    parser.add_argument("--postgres", metavar="DSN", help="store in PostgreSQL (fresh schema)")
    add_repeat(parser)
    args = parser.parse_args()
    timings = [t for t in args.timing.split(",") if t]
    if any(t not in TIMINGS for t in timings):
        parser.error(f"--timing: one or more of {', '.join(TIMINGS)}")
    cases = [(int(s), t) for s in args.batch_interval.split(",") for t in timings]
    per_eval: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    per_record: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    for _ in range(args.repeat):
        for interval, timing in cases:
            with tempfile.TemporaryDirectory(prefix="bench-live-stream-") as tmp:
                if args.postgres:
                    with private_schema(args.postgres, "bench") as (url, _):
                        cpu, records = _round(url, args.buses, args.seconds, interval, timing,
                                              Path(tmp))
                else:
                    cpu, records = _round(str(Path(tmp) / "c.db"), args.buses, args.seconds,
                                          interval, timing, Path(tmp))
            per_eval[(interval, timing)].append(cpu * 1000)
            per_record[(interval, timing)].append(cpu * 1e6 / max(records, 1))
    store = "PostgreSQL" if args.postgres else "SQLite"
    print(f"live rules under a steady stream: {args.buses} buses at 1 Hz, one evaluation a second, "
          f"{store}; {args.repeat} interleaved rounds, median (spread), evaluator CPU")
    for interval, timing in cases:
        print(f"  a batch every {interval} s, {timing}: "
              f"{Figure(tuple(per_eval[(interval, timing)])).show()} ms per evaluation, "
              f"{Figure(tuple(per_record[(interval, timing)])).show('{:,.1f}')} µs per record "
              "arrived")
    print(f"  target: well below {TARGET_US:.0f} µs per record arrived at 1 s batches")
    print(host_line())


if __name__ == "__main__":
    main()
