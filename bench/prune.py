"""What the prune costs the ingest (issue 15 item 2): records deleted per second and how long
one batch's transaction holds the store's writer (the longest an ingest commit waits).

    python -m bench.prune [--records 200000] [--batch 1000] [--repeat 3]

A fresh SQLite store (``synchronous=FULL``, as the collector runs) holds ``--records`` speed
records of one SP bus two years old (all past the 365-day minimum) and, for the baseline, the
same number again inserted in batches of ``--batch`` (one ingest commit each). Each round
prunes them all with :func:`collector.retention.prune` and re-inserts; printed: the prune's rate,
the longest and median batch transaction (timed around the store's writer lock), against the
time of one ingest commit of ``--batch`` records in the same run. Median (low-high, n) of
``--repeat`` interleaved rounds; target: a batch no longer than a few ingest commits.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import Figure, add_repeat, host_line
from collector import retention
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from protocols.records import ms_to_ts, ts_to_ms

NOW = ts_to_ms("2026-12-01T15:00:00Z")
OLD = ts_to_ms("2024-11-20T12:00:00Z")
BUS = "ABC1D23"


def rows(count: int, first_seq: int) -> list[tuple[Any, ...]]:
    """``count`` speed records a second apart, two years old."""
    return [record_row({"vehicle": BUS, "ts": ms_to_ts(OLD + i * 1000), "kind": "speed",
                        "agent": "a1", "seq": first_seq + i, "kmh": 50.0}, NOW)
            for i in range(count)]


class TimedLock:
    """The store's writer lock, timing how long each holder keeps it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.held: list[float] = []
        self._since: list[float] = []

    def __enter__(self) -> None:
        self.lock.__enter__()
        self._since.append(time.perf_counter())

    def __exit__(self, *exc: object) -> None:
        self.held.append(time.perf_counter() - self._since.pop())
        self.lock.__exit__(*exc)

    def acquire(self, *args: Any) -> bool:
        return bool(self.lock.acquire(*args))

    def release(self) -> None:
        self.lock.release()


@contextmanager
def timing(store: Store) -> Iterator[TimedLock]:
    """Time every transaction taken on ``store`` while inside."""
    original = store._lock
    timed = TimedLock(original)
    store._lock = timed  # type: ignore[assignment]
    try:
        yield timed
    finally:
        store._lock = original


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    add_repeat(parser)
    args = parser.parse_args()
    rates, longest, median_batch, commits = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "c.db"))
        profiles = load_profiles()
        seq = 1
        for _ in range(args.repeat):
            for start in range(0, args.records, args.batch):
                batch = rows(min(args.batch, args.records - start), seq)
                seq += len(batch)
                with timing(store) as timed:
                    store.put(batch)
                commits.append(timed.held[-1])
            with timing(store) as timed:
                began = time.perf_counter()
                done = retention.prune(store, None, profiles, None, now_ms=NOW,
                                       batch_rows=args.batch, pause_s=0.0)
                took = time.perf_counter() - began
            deleted = sum(p.deleted for p in done)
            assert deleted == args.records, deleted
            batches = [h for h in timed.held if h > 0]
            rates.append(deleted / took)
            longest.append(max(batches))
            median_batch.append(statistics.median(batches))
        store.close()
    print(f"bench.prune: {args.records:,} records past the minimum, batches of {args.batch:,}")
    print(f"  prune rate: {Figure(tuple(rates)).show()} records/s")
    print(f"  one batch's transaction: median {Figure(tuple(median_batch)).scaled(1000).show('{:.1f}')}"
          f" ms, longest {Figure(tuple(longest)).scaled(1000).show('{:.1f}')} ms")
    print(f"  one ingest commit of {args.batch:,} records (baseline): "
          f"{Figure(tuple(commits)).scaled(1000).show('{:.1f}')} ms")
    print(host_line())


if __name__ == "__main__":
    main()
