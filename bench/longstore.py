"""A long store for the benchmarks: N buses × D days at 1 Hz, built from compacted days in minutes
(issue 15 item 6: "the fleet-scale and pages benchmarks build their month- and year-long stores
from compacted days").

    from bench.longstore import build
    info = build("/tmp/year.db", buses=20, days=365, raw_days=1)

    python -m bench.longstore --buses 20 --days 30 --out /tmp/month.db   # the same, from a shell

One vehicle-day is generated once (bench.check's generator: a speed and a position record each
second, two trips with their drivers, stops, speeding every two hours; chained by ``prev`` from
``GENESIS``) and encoded once with :func:`collector.disc.encode_day`. Every (bus, day) is then
that day's columns changed where a copy differs — not the JSON re-encoded (13,000 records/s
would take a day for a year of 20 buses):

- ``ts`` (deltas of deltas: only the first two words change with a shift), ``odometer_m``
  (carried on from the day before);
- the dictionary words that name the bus, its line, its drivers' cards and its trips (trip ids
  carry the day), and the agent: one agent per bus-day (``pi-BUSnn-dK``), its chain from seq 1,
  so that each day's chain is whole without hashing every copy (each ``prev`` is rebuilt on
  decode from the copy's own content: every copy decodes to a valid chain);
- the positions' latitude, per bus (each bus runs on its own line, as bench.check's registry
  says).

then compressed again (zstd ``level``, default 3: a year of 20 buses in minutes; the sizes at
rest are those of the level, see bench.disc for the level the collector uses). The day rows go
straight into ``disc_days`` with the ``vehicles`` rows; the last ``raw_days`` days are stored as
rows instead (what a collector holds before compaction). No chain links nor checkpoints are
written: such a store is for reading (live rules, pages), not for ``frota verify``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from array import array
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import orjson
import zstandard

from bench.check import DAY_S, T0_MS, generate, registry
from collector import disc, store_disc
from collector.store import open_store
from collector.store_disc import INSERT_DAY
from protocols.chain import GENESIS, record_hash
from protocols.records import ts_to_ms

DAY_MS = DAY_S * 1000
#: Local day of T0_MS in São Paulo (bench.check: 2026-03-02 00:00 local).
FIRST_DAY = date(2026, 3, 2)


@dataclass(frozen=True)
class LongStore:
    """What :func:`build` made."""

    url: str
    buses: int
    days: int
    raw_days: int
    records: int           # in all, compacted and rows
    per_day: int           # records of one bus-day
    first_ms: int          # T0: the first day's local midnight
    blob_bytes: int        # sum of the compacted days' blobs
    seconds: float         # how long the build took

    @property
    def end_ms(self) -> int:
        """The end of the last day (exclusive)."""
        return self.first_ms + self.days * DAY_MS


def template_day(hours: int = 24, window_s: tuple[int, int] | None = None) -> list[str]:
    """The first ``hours`` of one bus-day of bench.check's generator (bus 0, day 0, from local
    midnight) — or, given ``window_s``, its local seconds from ``window_s[0]`` up to
    ``window_s[1]`` (tests: a few minutes around the morning's first events) — numbered from
    seq 1 and chained from GENESIS."""
    first_s, end_s = window_s or (0, hours * 3600)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "day.jsonl"
        generate(path, 1, -(-end_s // 3600))
        texts: list[str] = []
        prev = GENESIS
        for line in path.read_bytes().splitlines():
            rec = orjson.loads(line)
            if not first_s * 1000 <= ts_to_ms(rec["ts"]) - T0_MS < end_s * 1000:
                continue
            rec["seq"] = len(texts) + 1
            rec["prev"] = prev
            prev = record_hash(rec)
            texts.append(orjson.dumps(rec).decode())
    return texts


class _Template:
    """A blob taken apart: its head, shapes and columns (name -> kind, count, bytes)."""

    def __init__(self, blob: bytes) -> None:
        plain = zstandard.ZstdDecompressor().decompress(blob[1:])
        size = int.from_bytes(plain[:4], "little")
        self.head: dict[str, Any] = orjson.loads(plain[4:4 + size])
        at = 4 + size
        n = int(self.head["n"])
        self.shapes = plain[at:at + 8 * n]
        at += 8 * n
        self.columns: dict[str, tuple[str, int, bytes]] = {}
        for name, kind, length, nbytes in self.head["columns"]:
            self.columns[name] = (kind, length, plain[at:at + nbytes])
            at += nbytes

    def copy(self, changes: dict[str, tuple[str, bytes]], level: int) -> bytes:
        """A blob with the columns in ``changes`` replaced (name -> kind, bytes)."""
        parts = [self.shapes]
        listed = []
        for name, (kind, length, data) in self.columns.items():
            kind, data = changes.get(name, (kind, data))
            parts.append(data)
            listed.append([name, kind, length, len(data)])
        head = orjson.dumps({**self.head, "columns": listed})
        plain = len(head).to_bytes(4, "little") + head + b"".join(parts)
        return bytes([disc.VERSION]) + zstandard.ZstdCompressor(level=level).compress(plain)

    def shifted(self, name: str, by: int) -> tuple[str, bytes]:
        """An int-like column (deltas of deltas) with every value shifted by ``by``."""
        kind, _, data = self.columns[name]
        words = array("q")
        words.frombytes(data)
        words[0] += by
        if len(words) > 1:
            words[1] -= by
        return kind, words.tobytes()

    def words(self, name: str, rename: dict[str, str]) -> tuple[str, bytes]:
        """A string column with its words renamed (a dictionary's words, else every value)."""
        kind, length, data = self.columns[name]
        if kind == "dict":
            head, _, body = data.partition(b"\n")
            names = [rename.get(w, w) for w in orjson.loads(head)]
            return kind, orjson.dumps(names) + b"\n" + body
        values = [rename.get(v, v) if isinstance(v, str) else v
                  for v in disc._uncolumn(kind, data, length)]
        return disc._column(name, values)

    def distinct(self, name: str) -> set[str]:
        """The strings of a column."""
        return {v for v in self.values(name) if isinstance(v, str)}

    def values(self, name: str) -> list[Any]:
        kind, length, data = self.columns[name]
        return disc._uncolumn(kind, data, length)


def _changes(t: _Template, bus: int, day: int,
             odometer_per_day: int) -> dict[str, tuple[str, bytes]]:
    b = f"{bus:02d}"
    out = {
        "ts": t.shifted("ts", day * DAY_MS),
        "vehicle": t.words("vehicle", {"BUS00": f"BUS{b}"}),
        "agent": t.words("agent", {"pi-BUS00": f"pi-BUS{b}-d{day}"}),
        "odometer_m": t.shifted("odometer_m", bus * 1_000_000 + day * odometer_per_day),
    }
    if "line" in t.columns:     # a template of the day's first hours may have no trip yet
        out["line"] = t.words("line", {"L00": f"L{b}"})
    if "trip" in t.columns:
        out["trip"] = t.words("trip", {w: f"T{b}-{day}-{w.rsplit('-', 1)[1]}"
                                       for w in t.distinct("trip")})
    if "driver" in t.columns:
        out["driver"] = t.words("driver", {w: f"C{b}{w[3:]}" for w in t.distinct("driver")})
    if bus:
        out["lat"] = disc._column("lat", [round(v - bus * 0.01, 5) for v in t.values("lat")])
    return out


def build(url: str, buses: int, days: int, *, raw_days: int = 0, level: int = 3,
          hours: int = 24, window_s: tuple[int, int] | None = None,
          log: bool = False) -> LongStore:
    """A store at ``url`` (a new SQLite file or an empty PostgreSQL schema) with ``buses`` buses
    (BUS00…, bench.check's registry: :func:`fleet_registry`) × ``days`` local days from
    2026-03-02 (São Paulo), the last ``raw_days`` of them as rows, the others compacted; each
    day holds its first ``hours``, or its local seconds ``window_s`` (first, end: tests hold a
    few minutes). See the module docstring."""
    started = time.perf_counter()
    texts = template_day(hours, window_s)
    template = _Template(disc.encode_day(texts))
    odometers = template.values("odometer_m")
    per_day_m = int(odometers[-1]) - int(odometers[0]) + 1
    received = store_disc.pack_received([T0_MS + DAY_MS] * len(texts))
    first_off, last_off = _offset(texts[0]), _offset(texts[-1])
    store = open_store(url)
    blob_bytes = 0
    compacted = max(days - raw_days, 0)
    try:
        for day in range(compacted):
            name = (FIRST_DAY + timedelta(days=day)).isoformat()
            start = T0_MS + day * DAY_MS
            rows = []
            for bus in range(buses):
                blob = template.copy(_changes(template, bus, day, per_day_m), level)
                blob_bytes += len(blob)
                rows.append((f"BUS{bus:02d}", name, start, start + DAY_MS, len(texts),
                             start + first_off, start + last_off, None, None,
                             disc.VERSION, start + DAY_MS, blob, received))
            store.apply([(INSERT_DAY, rows)])
            if log and day % 30 == 29:
                print(f"longstore: {day + 1} days x {buses} buses compacted "
                      f"({time.perf_counter() - started:.0f} s)")
        for day in range(compacted, days):
            for bus in range(buses):
                blob = template.copy(_changes(template, bus, day, per_day_m), 1)
                got = store_disc.decode_rows(blob, received)
                vehicle = f"BUS{bus:02d}"
                for at in range(0, len(got), 20_000):
                    store.put([r.row(vehicle) for r in got[at:at + 20_000]])
        last = T0_MS + days * DAY_MS - 1000
        store.apply([(store.upsert_vehicle_sql,
                      [(f"BUS{b:02d}", last, last, f"pi-BUS{b:02d}-d{days - 1}")
                       for b in range(buses)])])
        store.disc_watermarks.refresh(store, force=True)
    finally:
        store.close()
    return LongStore(url, buses, days, raw_days, buses * days * len(texts), len(texts), T0_MS,
                     blob_bytes, time.perf_counter() - started)


def _offset(text: str) -> int:
    """A template record's time from the day's start, ms."""
    return ts_to_ms(orjson.loads(text)["ts"]) - T0_MS


def fleet_registry(buses: int) -> dict[str, object]:
    """The registry that goes with the store (bench.check's)."""
    return registry(buses)


def main() -> None:
    """Build a long store from the shell."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buses", type=int, default=20)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--raw-days", type=int, default=1)
    parser.add_argument("--level", type=int, default=3, help="zstd level of the copies")
    parser.add_argument("--out", required=True, help="a SQLite file or a postgresql:// URL")
    args = parser.parse_args()
    made = build(args.out, args.buses, args.days, raw_days=args.raw_days, level=args.level,
                 log=True)
    print(f"longstore: {made.records:,} records ({made.buses} buses x {made.days} days, "
          f"{made.raw_days} day(s) as rows) in {made.seconds:.0f} s; compacted blobs "
          f"{made.blob_bytes / max(made.records - made.buses * made.raw_days * made.per_day, 1):.2f}"
          f" bytes/record at zstd level {args.level}")


if __name__ == "__main__":
    main()
