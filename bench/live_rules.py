"""One live evaluation after a burst, against the size of the store (issue 16).

    python -m bench.live_rules [--buses 20] [--days 1,7,30] [--raw-days 0] [--repeat 3] [--whole]

Builds one SQLite store per size with bench.longstore (``--buses`` buses × ``--days`` days at
1 Hz, bench.check's generator: a speed and a position record per bus per second, two trips and
their drivers a day), every day compacted but the last ``--raw-days``, held as rows (what a
collector holds with the daily compaction; the default 0 because building a day of 20 buses as
rows takes longer than the rest of the run on the shared development machine). The live rules
are then brought up to date once (timed, printed), replaying the days held as rows from an empty
engine state saved as the checkpoint at their start: replaying a 30-day store of 20 buses (100
million records) through the engine would take hours on the development machine. So the engine
state holds the same (the raw days', then the bursts') in every store; what the store size
changes is everything the evaluator reads around it (the records' indexes, the compacted days,
the checkpoints and findings tables). Then, ``--repeat``
interleaved rounds (at least 3): each store receives the next minute of its buses (a burst:
speed and position records of the next day's first hour) and ONE live evaluation is timed
(collector/live_rules.py), the peak Python memory of one more evaluation measured once per store
afterwards (tracemalloc; not timed). ``--whole`` adds the whole-store evaluation of before
(``evaluate_store``, collector/findings.py) on the smallest store as a baseline (gigabytes of
memory at 20 buses).

Printed: median (spread) of each, the ratio of the largest store's evaluation to the smallest's,
and the issue's targets: time flat in the store size (within 2x from 1 to 30 days), memory
bounded (the same order whatever the store).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from bench.check import T0_MS, generate, registry
from bench.common import Figure, add_repeat, host_line, target
from bench.longstore import build as build_long
from collector import registry as fleet
from collector import store_live
from collector.findings import evaluate_store
from collector.live_rules import LiveRules
from collector.live_state import LiveEngine, snapshot
from collector.partitions import FLEET
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from protocols.records import ms_to_ts, ts_to_ms

DAY_MS = 86_400_000
MINUTE_MS = 60_000


def bursts(work: Path, buses: int, days: int, minutes: int) -> list[list[tuple[Any, ...]]]:
    """The rows of each of the next ``minutes`` minutes after ``days`` days: the first hour of a
    bench.check day moved to that day, each bus a new agent for the day."""
    source = work / "burst.jsonl"
    if not source.exists():
        generate(source, buses, 1)
    out: list[list[tuple[Any, ...]]] = [[] for _ in range(minutes)]
    seqs: dict[str, int] = {}
    for line in source.read_bytes().splitlines():
        rec = orjson.loads(line)
        ms = ts_to_ms(rec["ts"])
        minute = (ms - T0_MS) // MINUTE_MS
        if minute >= minutes:
            break
        vehicle = rec["vehicle"]
        seqs[vehicle] = seqs.get(vehicle, 0) + 1
        rec.update(ts=ms_to_ts(ms + days * DAY_MS), agent=f"pi-{vehicle}-d{days}",
                   seq=seqs[vehicle])
        out[minute].append(record_row(rec, ms + days * DAY_MS))
    return out


def seed(store: Store, live: LiveRules, reg: fleet.Registry, boundary_ms: int) -> None:
    """An empty engine saved as the checkpoint at ``boundary`` (the last day's start): the
    catch-up replays from it, not from the first day."""
    store_live.reset(store, live.fingerprint)
    blob = snapshot(LiveEngine(reg, live.profiles, live.default))
    store.apply([
        ("INSERT INTO live_checkpoints (part, boundary_ms, tail, state, made_ms) "
         "VALUES (?, ?, 0, ?, 0)", [(FLEET, boundary_ms, blob)]),
        ("INSERT INTO live_parts (vehicle, part) VALUES (?, ?)",
         [(v, FLEET) for v in reg.vehicles]),
    ])


def main() -> None:
    """Build the stores, catch up, time the bursts' evaluations, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buses", type=int, default=20)
    parser.add_argument("--days", default="1,7,30", help="store sizes in days, comma-separated")
    parser.add_argument("--raw-days", type=int, default=0,
                        help="the last days of each store held as rows, not compacted")
    parser.add_argument("--whole", action="store_true",
                        help="also time the whole-store evaluation on the smallest store")
    add_repeat(parser)
    args = parser.parse_args()
    days = sorted(int(d) for d in args.days.split(","))
    work = Path(tempfile.mkdtemp(prefix="frota-bench-live-"))
    reg_path = work / "registry.json"
    reg_path.write_text(json.dumps(registry(args.buses)))
    reg = fleet.load(reg_path)
    profiles = load_profiles()
    stores: dict[int, Store] = {}
    lives: dict[int, LiveRules] = {}
    for d in days:
        started = time.perf_counter()
        raw = min(args.raw_days, d)
        made = build_long(str(work / f"{d}d.db"), args.buses, d, raw_days=raw)
        built = time.perf_counter() - started
        stores[d] = open_store(str(work / f"{d}d.db"))
        lives[d] = LiveRules(stores[d], reg, reg_path.read_bytes(), profiles)
        seed(stores[d], lives[d], reg, T0_MS + (d - raw) * DAY_MS)
        as_of = T0_MS + d * DAY_MS
        started = time.perf_counter()
        done = lives[d].evaluate(as_of, as_of)
        print(f"{d:>2} day(s): {made.records:,} records ({d - raw} day(s) x {args.buses} buses "
              f"compacted, {raw} as {raw * made.buses * made.per_day:,} rows) built in "
              f"{built:.0f} s; catch-up (the raw days replayed, checkpoints written: "
              f"{sum(done.replayed.values()):,} records) {time.perf_counter() - started:.1f} s",
              flush=True)
    live_s: dict[int, list[float]] = {d: [] for d in days}
    replayed: dict[int, list[int]] = {d: [] for d in days}
    whole_s: list[float] = []
    per_store = {d: bursts(work, args.buses, d, args.repeat + 1) for d in days}
    arrived = 0
    for r in range(args.repeat):        # every case once per round: interleaved
        for d in days:
            rows = per_store[d][r]
            arrived = len(rows)
            stores[d].put(rows)
            as_of = T0_MS + d * DAY_MS + (r + 1) * MINUTE_MS
            started = time.perf_counter()
            done = lives[d].evaluate(as_of, as_of)
            live_s[d].append(time.perf_counter() - started)
            replayed[d].append(sum(done.replayed.values()))
        if args.whole:
            as_of = T0_MS + days[0] * DAY_MS + (r + 1) * MINUTE_MS
            started = time.perf_counter()
            evaluate_store(stores[days[0]], reg, as_of, profiles)
            whole_s.append(time.perf_counter() - started)
    peak: dict[int, float] = {}
    for d in days:
        stores[d].put(per_store[d][args.repeat])
        as_of = T0_MS + d * DAY_MS + (args.repeat + 1) * MINUTE_MS
        tracemalloc.start()
        lives[d].evaluate(as_of, as_of)
        peak[d] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    print(f"{args.repeat} interleaved rounds, median (spread); a burst = 1 minute of "
          f"{args.buses} buses ({arrived:,} records)")
    figures = {d: Figure(tuple(live_s[d])) for d in days}
    for d in days:
        print(f"  live evaluation, {d:>2} day(s) stored: {figures[d].show('{:.3f}')} s; records "
              f"replayed {sorted(replayed[d])}; peak memory {peak[d]:.1f} MiB (tracemalloc)")
    if whole_s:
        whole = Figure(tuple(whole_s))
        print(f"  baseline, the whole-store evaluation (before), {days[0]} day(s): "
              f"{whole.show('{:.2f}')} s ({whole.ratio(figures[days[0]]).show('{:.0f}')}x the "
              "live one)")
    flat = figures[days[-1]].ratio(figures[days[0]])
    print(f"  {days[-1]} days / {days[0]} day(s): {flat.show('{:.2f}')}x — target: within 2x from "
          f"1 to 30 days: {target(flat.median <= 2)} (measured {days[0]} to {days[-1]} days)")
    grow = peak[days[-1]] / peak[days[0]]
    print(f"  memory {days[-1]} days / {days[0]} day(s): {grow:.2f}x — target: bounded (not "
          f"growing with the store): {target(grow <= 2)}")
    print(host_line())
    for store in stores.values():
        store.close()
    for file in work.iterdir():
        file.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
