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
import time

from bench.common import add_repeat, host_line
from bench.sized_stores import SizedStores, flatness, sized_stores, timed_bursts
from collector.retention_days import Summaries
from collector.retention_findings import retention_findings


def main() -> None:
    """Build the stores, sum them up, time the runs after each burst, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buses", type=int, default=2)
    parser.add_argument("--days", default="1,7,30", help="store sizes in days, comma-separated")
    add_repeat(parser)
    args = parser.parse_args()
    with sized_stores("frota-bench-retention-", args.buses, args.days) as sized:
        _run(sized, args.repeat)


def _run(sized: SizedStores, repeat: int) -> None:
    days, stores = sized.days, sized.stores
    kept: dict[int, Summaries] = {}
    first: dict[int, float] = {}
    for d in days:
        made = sized.build(d)
        kept[d] = Summaries(stores[d])
        started = time.perf_counter()
        found = retention_findings(stores[d], sized.registry, sized.profiles, sized.end_ms(d),
                                   summaries=kept[d])
        first[d] = time.perf_counter() - started
        print(f"{d:>2} day(s): {made.records:,} records compacted; first summing-up (every day "
              f"decoded once) {first[d]:.1f} s, {len(found)} finding(s)", flush=True)

    def run(d: int, now: int) -> None:
        retention_findings(stores[d], sized.registry, sized.profiles, now, summaries=kept[d])

    figures, arrived = timed_bursts(sized, repeat, run)
    print(f"{repeat} interleaved rounds, median (spread); a burst = 1 minute of "
          f"{sized.buses} buses ({arrived:,} records)")
    for d in days:
        print(f"  retention.minimum after the burst, {d:>2} day(s) stored: "
              f"{figures[d].show('{:.3f}')} s (first summing-up {first[d]:.1f} s, "
              f"{first[d] / figures[d].median:.0f}x)")
    print(flatness(figures, days))
    print(host_line())


if __name__ == "__main__":
    main()
