"""``retention.minimum`` after a burst, against the size of the store (issue 16, the store-only
rule that read the minimum period at every run).

    python -m bench.retention_days [--buses 2] [--days 1,7,30] [--repeat 3]

Builds one SQLite store per size with bench.longstore (``--buses`` buses × ``--days`` days at
1 Hz, every day compacted), sums it up once for ``retention.minimum`` (collector/retention_days.py:
every compacted day decoded once; timed, printed — the cost of the store, once, as a collector
pays it on its first run over an existing store). Then ``--repeat`` interleaved rounds (at least
3): each store receives the next minute of its buses and ONE store-only run of the rule is timed
(the summaries brought up to date with what arrived, the findings combined from them), as the
running collector does it with its summaries kept between runs.

Printed: median (spread) of each, the ratio of the largest store's run to the smallest's, the
first summing-up as the baseline (what a run cost when it read the period whole), and the
target: time flat in the store size (within 2x from 1 to 30 days).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.check import T0_MS, registry
from bench.common import Figure, add_repeat, host_line, target
from bench.live_rules import DAY_MS, MINUTE_MS, bursts
from bench.longstore import build as build_long
from collector import registry as fleet
from collector.retention_days import Summaries
from collector.retention_findings import retention_findings
from collector.rules.profile import load_profiles
from collector.store import Store, open_store


def main() -> None:
    """Build the stores, sum them up, time the runs after each burst, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buses", type=int, default=2)
    parser.add_argument("--days", default="1,7,30", help="store sizes in days, comma-separated")
    add_repeat(parser)
    args = parser.parse_args()
    days = sorted(int(d) for d in args.days.split(","))
    work = Path(tempfile.mkdtemp(prefix="frota-bench-retention-"))
    reg_path = work / "registry.json"
    reg_path.write_text(json.dumps(registry(args.buses)))
    reg = fleet.load(reg_path)
    profiles = load_profiles()
    stores: dict[int, Store] = {}
    kept: dict[int, Summaries] = {}
    first: dict[int, float] = {}
    for d in days:
        made = build_long(str(work / f"{d}d.db"), args.buses, d)
        stores[d] = open_store(str(work / f"{d}d.db"))
        kept[d] = Summaries(stores[d])
        started = time.perf_counter()
        found = retention_findings(stores[d], reg, profiles, T0_MS + d * DAY_MS, summaries=kept[d])
        first[d] = time.perf_counter() - started
        print(f"{d:>2} day(s): {made.records:,} records compacted; first summing-up (every day "
              f"decoded once) {first[d]:.1f} s, {len(found)} finding(s)", flush=True)
    per_store = {d: bursts(work, args.buses, d, args.repeat) for d in days}
    runs: dict[int, list[float]] = {d: [] for d in days}
    arrived = 0
    for r in range(args.repeat):        # every case once per round: interleaved
        for d in days:
            rows = per_store[d][r]
            arrived = len(rows)
            stores[d].put(rows)
            now = T0_MS + d * DAY_MS + (r + 1) * MINUTE_MS
            started = time.perf_counter()
            retention_findings(stores[d], reg, profiles, now, summaries=kept[d])
            runs[d].append(time.perf_counter() - started)
    print(f"{args.repeat} interleaved rounds, median (spread); a burst = 1 minute of "
          f"{args.buses} buses ({arrived:,} records)")
    figures = {d: Figure(tuple(runs[d])) for d in days}
    for d in days:
        print(f"  retention.minimum after the burst, {d:>2} day(s) stored: "
              f"{figures[d].show('{:.3f}')} s (first summing-up {first[d]:.1f} s, "
              f"{first[d] / figures[d].median:.0f}x)")
    flat = figures[days[-1]].ratio(figures[days[0]])
    print(f"  {days[-1]} days / {days[0]} day(s): {flat.show('{:.2f}')}x — target: within 2x from "
          f"1 to 30 days: {target(flat.median <= 2)} (measured {days[0]} to {days[-1]} days)")
    print(host_line())
    for store in stores.values():
        store.close()
    for file in work.iterdir():
        file.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
