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
import time
import tracemalloc

from bench.check import T0_MS
from bench.common import Figure, add_repeat, host_line, target
from bench.sized_stores import (
    DAY_MS,
    SizedStores,
    bursts,
    flatness,
    sized_stores,
    timed_bursts,
)
from collector import registry as fleet
from collector import store_live
from collector.findings import evaluate_store
from collector.live_rules import LiveRules
from collector.live_state import LiveEngine, snapshot
from collector.partitions import FLEET
from collector.store import Store


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
    with sized_stores("frota-bench-live-", args.buses, args.days) as sized:
        _run(sized, args)


def _run(sized: SizedStores, args: argparse.Namespace) -> None:
    days, reg, stores = sized.days, sized.registry, sized.stores
    lives: dict[int, LiveRules] = {}
    for d in days:
        started = time.perf_counter()
        raw = min(args.raw_days, d)
        made = sized.build(d, raw_days=raw)
        built = time.perf_counter() - started
        lives[d] = LiveRules(stores[d], reg, sized.registry_path.read_bytes(), sized.profiles)
        seed(stores[d], lives[d], reg, T0_MS + (d - raw) * DAY_MS)
        as_of = sized.end_ms(d)
        started = time.perf_counter()
        done = lives[d].evaluate(as_of, as_of)
        print(f"{d:>2} day(s): {made.records:,} records ({d - raw} day(s) x {args.buses} buses "
              f"compacted, {raw} as {raw * made.buses * made.per_day:,} rows) built in "
              f"{built:.0f} s; catch-up (the raw days replayed, checkpoints written: "
              f"{sum(done.replayed.values()):,} records) {time.perf_counter() - started:.1f} s",
              flush=True)
    replayed: dict[int, list[int]] = {d: [] for d in days}
    whole_s: list[float] = []
    per_store = {d: bursts(sized.work, args.buses, d, args.repeat + 1) for d in days}

    def live(d: int, as_of: int) -> None:
        replayed[d].append(sum(lives[d].evaluate(as_of, as_of).replayed.values()))

    def whole(d: int, as_of: int) -> None:
        if args.whole and d == days[0]:
            started = time.perf_counter()
            evaluate_store(stores[d], reg, as_of, sized.profiles)
            whole_s.append(time.perf_counter() - started)

    figures, arrived = timed_bursts(sized, args.repeat, live, per_store, untimed=whole)
    peak: dict[int, float] = {}
    for d in days:
        stores[d].put(per_store[d][args.repeat])
        as_of = sized.end_ms(d, args.repeat + 1)
        tracemalloc.start()
        lives[d].evaluate(as_of, as_of)
        peak[d] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    print(f"{args.repeat} interleaved rounds, median (spread); a burst = 1 minute of "
          f"{args.buses} buses ({arrived:,} records)")
    for d in days:
        print(f"  live evaluation, {d:>2} day(s) stored: {figures[d].show('{:.3f}')} s; records "
              f"replayed {sorted(replayed[d])}; peak memory {peak[d]:.1f} MiB (tracemalloc)")
    if whole_s:
        base = Figure(tuple(whole_s))
        print(f"  baseline, the whole-store evaluation (before), {days[0]} day(s): "
              f"{base.show('{:.2f}')} s ({base.ratio(figures[days[0]]).show('{:.0f}')}x the "
              "live one)")
    print(flatness(figures, days))
    grow = peak[days[-1]] / peak[days[0]]
    print(f"  memory {days[-1]} days / {days[0]} day(s): {grow:.2f}x — target: bounded (not "
          f"growing with the store): {target(grow <= 2)}")
    print(host_line())


if __name__ == "__main__":
    main()
