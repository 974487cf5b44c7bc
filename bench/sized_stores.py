"""Stores of several sizes for the benchmarks that ask "does it cost the same whatever is stored"
(bench.live_rules, bench.retention_days): one bench.longstore store per size in days, the fleet
registry that goes with them, each store's next minutes of records (a burst each), the timed
rounds interleaved (every size once per round), and the issue's flatness target."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.check import T0_MS, generate, registry
from bench.common import Figure, target
from bench.longstore import LongStore
from bench.longstore import build as build_long
from collector import registry as fleet
from collector.rules.profile import Profile, load_profiles
from collector.store import Store, open_store, record_row
from protocols.records import ms_to_ts, ts_to_ms

DAY_MS = 86_400_000
MINUTE_MS = 60_000


@dataclass
class SizedStores:
    """The work folder, the fleet (its registry file and loaded) and the stores by days."""

    work: Path
    buses: int
    days: list[int]
    registry_path: Path
    registry: fleet.Registry
    profiles: dict[str, Profile]
    stores: dict[int, Store] = field(default_factory=dict)

    def build(self, days: int, raw_days: int = 0) -> LongStore:
        """Build and open the store of ``days`` days (the last ``raw_days`` as rows)."""
        path = str(self.work / f"{days}d.db")
        made = build_long(path, self.buses, days, raw_days=raw_days)
        self.stores[days] = open_store(path)
        return made

    def end_ms(self, days: int, minutes: int = 0) -> int:
        """The end of a store's last day, ``minutes`` later (the bursts' device time)."""
        return T0_MS + days * DAY_MS + minutes * MINUTE_MS


@contextmanager
def sized_stores(prefix: str, buses: int, days: str) -> Iterator[SizedStores]:
    """A work folder with the registry of ``buses`` buses; ``days`` the sizes, comma-separated.
    The stores are closed and the folder removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        reg_path = work / "registry.json"
        reg_path.write_text(json.dumps(registry(buses)))
        sized = SizedStores(work, buses, sorted(int(d) for d in days.split(",")), reg_path,
                            fleet.load(reg_path), load_profiles())
        try:
            yield sized
        finally:
            for store in sized.stores.values():
                store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


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


def timed_bursts(sized: SizedStores, repeat: int, run: Callable[[int, int], Any],
                 per_store: dict[int, list[list[tuple[Any, ...]]]] | None = None,
                 untimed: Callable[[int, int], Any] | None = None,
                 ) -> tuple[dict[int, Figure], int]:
    """``repeat`` interleaved rounds: in each, every store receives its next minute (a burst,
    from ``per_store`` when given) and ``run(days, now_ms)`` is timed, then ``untimed`` called
    the same way. The figure of each size, and a burst's records."""
    if per_store is None:
        per_store = {d: bursts(sized.work, sized.buses, d, repeat) for d in sized.days}
    seconds: dict[int, list[float]] = {d: [] for d in sized.days}
    arrived = 0
    for r in range(repeat):        # every case once per round: interleaved
        for d in sized.days:
            rows = per_store[d][r]
            arrived = len(rows)
            sized.stores[d].put(rows)
            started = time.perf_counter()
            run(d, sized.end_ms(d, r + 1))
            seconds[d].append(time.perf_counter() - started)
            if untimed is not None:
                untimed(d, sized.end_ms(d, r + 1))
    return {d: Figure(tuple(seconds[d])) for d in sized.days}, arrived


def flatness(figures: dict[int, Figure], days: list[int]) -> str:
    """The largest store's run against the smallest's, and the issue's target."""
    flat = figures[days[-1]].ratio(figures[days[0]])
    return (f"  {days[-1]} days / {days[0]} day(s): {flat.show('{:.2f}')}x — target: within 2x "
            f"from 1 to 30 days: {target(flat.median <= 2)} (measured {days[0]} to {days[-1]} "
            "days)")
