"""One live evaluation after a burst, against the size of the store (issue 16 item 1).

    python -m bench.live_rules [--buses 2] [--days 1,7] [--repeat 3]

Builds one SQLite store per size with ``--days`` days of ``--buses`` buses at 1 Hz (bench.check's
generator: a speed and a position record per bus per second, trips, drivers, stops, speeding),
brings its live findings up to date once (the catch-up: the whole store replayed once, the
checkpoints written; timed, printed), then, ``--repeat`` interleaved rounds (at least 3): each
store receives the next minute of its buses (a burst) and ONE live evaluation is timed
(collector/live_rules.py). In the same rounds, the baseline: the whole-store evaluation the
collector did before (``evaluate_store`` in collector/findings.py) on the smallest store. Then, once per
store, the peak Python memory of one more evaluation (tracemalloc; not timed).

Printed: median (spread) of each, the ratio of the largest store's evaluation to the smallest's,
and the targets: time flat in the store size (within 2x from 1 to 30 days), memory bounded (the
same order whatever the store).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import orjson

from bench.check import T0_MS, generate, registry
from bench.common import Figure, add_repeat, host_line, target
from collector import registry as fleet
from collector.findings import evaluate_store
from collector.live_rules import LiveRules
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from protocols.records import ts_to_ms

DAY_MS = 86_400_000
MINUTE_MS = 60_000
CHUNK = 20_000


def build(records: Path, db: Path, until_ms: int) -> tuple[Store, int]:
    """A store with the records before ``until``; how many."""
    store = open_store(str(db))
    rows = []
    count = 0
    with records.open("rb") as handle:
        for line in handle:
            rec = orjson.loads(line)
            if ts_to_ms(rec["ts"]) >= until_ms:
                break
            rows.append(record_row(rec, 0))
            if len(rows) >= CHUNK:
                count += store.put(rows)
                rows = []
    if rows:
        count += store.put(rows)
    return store, count


def burst(records: Path, since_ms: int, until_ms: int) -> list[tuple[object, ...]]:
    """The rows of the records with since <= ts < until (the file is in time order)."""
    rows = []
    with records.open("rb") as handle:
        for line in handle:
            rec = orjson.loads(line)
            ms = ts_to_ms(rec["ts"])
            if ms >= until_ms:
                break
            if ms >= since_ms:
                rows.append(record_row(rec, 0))
    return rows


def main() -> None:
    """Build the stores, catch up, time the bursts' evaluations, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buses", type=int, default=2)
    parser.add_argument("--days", default="1,7", help="store sizes in days, comma-separated")
    add_repeat(parser)
    args = parser.parse_args()
    days = sorted(int(d) for d in args.days.split(","))
    work = Path(tempfile.mkdtemp(prefix="frota-bench-live-"))
    reg_path = work / "registry.json"
    reg_path.write_text(json.dumps(registry(args.buses)))
    reg = fleet.load(reg_path)
    profiles = load_profiles()
    records = work / "records.jsonl"
    started = time.perf_counter()
    total = generate(records, args.buses, days[-1] * 24 + 1)
    print(f"generated {total:,} records ({args.buses} buses x {days[-1]} days + 1 h at 1 Hz) in "
          f"{time.perf_counter() - started:.0f} s")
    stores: dict[int, Store] = {}
    lives: dict[int, LiveRules] = {}
    for d in days:
        started = time.perf_counter()
        stores[d], count = build(records, work / f"{d}d.db", T0_MS + d * DAY_MS)
        built = time.perf_counter() - started
        lives[d] = LiveRules(stores[d], reg, reg_path.read_bytes(), profiles)
        as_of = T0_MS + d * DAY_MS
        started = time.perf_counter()
        lives[d].evaluate(as_of, as_of)
        print(f"{d} day(s): {count:,} records stored in {built:.0f} s; catch-up (the whole store "
              f"replayed once, checkpoints written) {time.perf_counter() - started:.1f} s")
    live_s: dict[int, list[float]] = {d: [] for d in days}
    replayed: dict[int, list[int]] = {d: [] for d in days}
    whole_s: list[float] = []
    arrived = 0
    for r in range(args.repeat):        # every case once per round: interleaved
        for d in days:
            since = T0_MS + d * DAY_MS + r * MINUTE_MS
            rows = burst(records, since, since + MINUTE_MS)
            arrived = len(rows)
            stores[d].put(rows)
            as_of = since + MINUTE_MS
            started = time.perf_counter()
            done = lives[d].evaluate(as_of, as_of)
            live_s[d].append(time.perf_counter() - started)
            replayed[d].append(sum(done.replayed.values()))
        as_of = T0_MS + days[0] * DAY_MS + (r + 1) * MINUTE_MS
        started = time.perf_counter()
        evaluate_store(stores[days[0]], reg, as_of, profiles)
        whole_s.append(time.perf_counter() - started)
    peak: dict[int, float] = {}
    for d in days:
        since = T0_MS + d * DAY_MS + args.repeat * MINUTE_MS
        stores[d].put(burst(records, since, since + MINUTE_MS))
        tracemalloc.start()
        lives[d].evaluate(since + MINUTE_MS, since + MINUTE_MS)
        peak[d] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    print(f"{args.repeat} interleaved rounds, median (spread); a burst = 1 minute of "
          f"{args.buses} buses ({arrived:,} records)")
    figures = {d: Figure(tuple(live_s[d])) for d in days}
    for d in days:
        print(f"  live evaluation, {d:>2} day(s) stored: {figures[d].show('{:.3f}')} s; records "
              f"replayed {sorted(replayed[d])}; peak memory {peak[d]:.1f} MiB (tracemalloc)")
    whole = Figure(tuple(whole_s))
    print(f"  baseline, the whole-store evaluation (before), {days[0]} day(s): "
          f"{whole.show('{:.2f}')} s ({whole.ratio(figures[days[0]]).show('{:.0f}')}x the live "
          "one)")
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
