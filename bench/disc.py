"""The digital disc at rest (issue 15 item 6): a bus's day in the store as raw rows against the
same day compacted, in bytes per record, compaction speed and reading the day back.

    python -m bench.disc [--seconds 43200] [--repeat 3]

The day: ``--seconds`` of one bus from bench.busday (real registrador status frames, NMEA
RMC+GGA sentences and door-counter frames built by the protocols' encoders and decoded by the
agent's decoders, so every record carries its ``raw`` frame), numbered and chained by ``prev``
as the agent does; 11:00 to 23:00 local (São Paulo) by default, one local day.

Each of ``--repeat`` interleaved rounds (median and spread printed):

- **raw rows**: the day's rows stored in a fresh SQLite store (``Store.put``, one transaction,
  each with its chain hash and prev) — the baseline of the compaction's speed;
- **compaction**: that store's day compacted (``collector/compaction.py``: rows read, encoded,
  written, read back and decoded, rows deleted, in one transaction);
- **reading**: ``Store.records`` over the day from a store of raw rows, and from the store of the
  compacted day (the decoded-day cache emptied first: a cold read).

Bytes at rest: each store's SQLite file after VACUUM, by table with its indexes (SQLite's dbstat):
the records (their rows with their chain hashes and prev, or the compacted day's row: blob,
arrival times, columns) and the chain links ``frota verify`` checks them against (none beside
raw rows, whose rows carry their hashes; folded into the compacted day once the live verifier
has walked them, which the benchmark's store says it has). Targets: <= 8
bytes per record at rest, chain included (goal <= 4).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import orjson

from bench.busday import T0_MS, VEHICLE, bus_records
from bench.common import Figure, add_repeat, host_line, target
from collector import compaction, store_disc
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from protocols.chain import GENESIS, record_hash

AGENT = "9b2f0c4e-0000-4000-8000-000000000001"


def day(seconds: int) -> list[dict[str, object]]:
    """The day's records, chained, in stored order."""
    prev, out = GENESIS, []
    for seq, (_, rec) in enumerate(bus_records(seconds), 1):
        chained = {**rec, "agent": AGENT, "seq": seq, "prev": prev}
        prev = record_hash(chained)
        out.append(chained)
    return out


def store_rows(path: Path, recs: list[dict[str, object]]) -> Store:
    """A fresh store at ``path`` with the day's rows, each with its chain hash and prev as the
    ingest stores them (collector/store_chain.py; one transaction)."""
    store = open_store(str(path))
    store.put([record_row(r, T0_MS, record_hash(r), str(r["prev"])) for r in recs])
    # the live verifier has walked the chain (collector/verifier.py): the compaction may fold
    # the day's links into it
    last = recs[-1]
    store.apply([("INSERT INTO chain_state (vehicle, agent, seq, hash) VALUES (?, ?, ?, ?)",
                  [(VEHICLE, AGENT, last["seq"], record_hash(last))])])
    return store


def compact(store: Store) -> int:
    """Compact the store's day; how many records."""
    done = compaction.compact(store, None, load_profiles(), now_ms=T0_MS + 4 * 86_400_000,
                              pause_s=0)
    return sum(d.records for d in done)


def at_rest(path: Path) -> dict[str, int]:
    """Bytes of each table with its indexes, after VACUUM (SQLite's dbstat)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("VACUUM")
        tables = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master"))
        sizes: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            owner = tables.get(name, name)
            sizes[owner] = sizes.get(owner, 0) + int(size)
        return sizes
    finally:
        conn.close()


def read(store: Store, cold: bool) -> int:
    """Records of the day read through ``Store.records``."""
    if cold:
        store_disc.clear_cache()
    return sum(1 for _ in store.records(VEHICLE))


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=43_200,
                        help="seconds of the day from 11:00 local (at most 46,799: one local day)")
    add_repeat(parser)
    args = parser.parse_args()
    started = time.perf_counter()
    recs = day(min(args.seconds, 46_799))
    count = len(recs)
    print(f"bench.disc: one bus-day, {count:,} records ({args.seconds:,} s from bench.busday: "
          f"registrador, GPS and door frames with their raw bytes, chained), made in "
          f"{time.perf_counter() - started:.0f} s")
    work = Path(tempfile.mkdtemp(prefix="frota-bench-disc-"))
    try:
        store_rows(work / "raw.db", recs).close()   # closed: the WAL checkpointed, then copied
        shutil.copy(work / "raw.db", work / "packed.db")
        raw_store = open_store(str(work / "raw.db"))
        packed_store = open_store(str(work / "packed.db"))
        assert compact(packed_store) == count, "the day was not compacted whole"
        texts = [orjson.dumps(r).decode() for r in recs]
        assert list(packed_store.records(VEHICLE)) == list(raw_store.records(VEHICLE)) == texts
        put_s, compact_s, rows_s, disc_s = [], [], [], []
        for n in range(args.repeat):
            path = work / f"round{n}.db"
            began = time.perf_counter()
            fresh = store_rows(path, recs)
            put_s.append(time.perf_counter() - began)
            began = time.perf_counter()
            compact(fresh)
            compact_s.append(time.perf_counter() - began)
            fresh.close()
            path.unlink()
            began = time.perf_counter()
            read(raw_store, False)
            rows_s.append(time.perf_counter() - began)
            began = time.perf_counter()
            read(packed_store, True)
            disc_s.append(time.perf_counter() - began)
        raw_store.close()
        packed_store.close()
        raw, packed = at_rest(work / "raw.db"), at_rest(work / "packed.db")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raw_records = raw["records"] / count
    packed_records = (packed.get("disc_days", 0) + packed.get("records", 0)) / count
    links = packed.get("links", 0) / count
    print("  bytes per record at rest (SQLite, table with its indexes, after VACUUM):")
    print(f"    raw rows:      {raw_records:8.2f}  (JSON alone "
          f"{sum(len(t) for t in texts) / count:.1f})")
    print(f"    compacted day: {packed_records:8.2f}  chain included (each prev rebuilt) — ratio "
          f"to raw rows {packed_records / raw_records:.4f}; target <= 8: "
          f"{target(packed_records <= 8)}, goal <= 4: {target(packed_records <= 4)}")
    print(f"    + chain links frota verify checks them against: {links:.2f} left beside the "
          f"compacted day (folded into it), {raw.get('links', 0) / count:.2f} beside the raw rows "
          "(whose rows carry their hashes)")
    whole_raw, whole = (raw_records + raw.get("links", 0) / count), packed_records + links
    print(f"    records and links together: raw {whole_raw:.2f}, compacted {whole:.2f} — ratio "
          f"{whole / whole_raw:.4f}; target <= 8: {target(whole <= 8)}, goal <= 4: "
          f"{target(whole <= 4)}")
    put, comp = Figure(tuple(put_s)).per(count), Figure(tuple(compact_s)).per(count)
    rows, disc = Figure(tuple(rows_s)).per(count), Figure(tuple(disc_s)).per(count)
    print(f"  {args.repeat} interleaved rounds, median (low-high):")
    print(f"    compaction: {comp.show()} records/s; storing the raw rows: {put.show()} "
          f"records/s; ratio {comp.ratio(put).show('{:.2f}')}")
    print(f"    reading the day back: compacted {disc.show()} records/s; raw rows {rows.show()} "
          f"records/s; ratio {disc.ratio(rows).show('{:.2f}')}")
    print(host_line())


if __name__ == "__main__":
    main()
