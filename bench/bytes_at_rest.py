"""Bytes per record at rest in the collector's store, ``raw`` stored once against twice (issue 16
item 4).

    python -m bench.bytes_at_rest [--seconds 21600] [--postgres DSN]

One bus at 1 Hz for ``--seconds``: a speed record from a real registrador status frame
(``protocols/registrador/encoder.py``; its hex in ``raw``) and a GPS position each second,
chained (``prev``) as agents send them. Stored through ``collector.store`` twice: as the
collector stores them now (``raw`` once, inside the record's JSON) and as it did before (the
same rows with ``raw`` copied into its own column too). SQLite: the database file's bytes per
record after VACUUM (indexes included); PostgreSQL (``--postgres``): the ``records`` table's
total relation size (indexes and TOAST included) after VACUUM FULL, in a fresh schema each. Sizes
are deterministic: one run each, no repeats. The issue's figure: ≈ 200 of 940 bytes per record
were the second copy.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg

from collector.store import open_store, record_row
from frota.harness.postgres import private_schema
from protocols.chain import GENESIS, record_hash
from protocols.records import make_record, ms_to_ts, ts_to_ms
from protocols.registrador.encoder import encode_status

T0 = ts_to_ms("2026-11-20T03:00:00Z")
BUS = "ABC1D23"


def records(seconds: int) -> list[dict[str, Any]]:
    """The bus's records in (ts, seq) order, chained."""
    prev, seq, out = GENESIS, 0, []
    odometer = 0
    for n in range(seconds):
        ts = ms_to_ts(T0 + n * 1000)
        kmh = float((n // 60) % 90)
        odometer += int(kmh / 3.6)
        frame = encode_status(n + 1, T0 + n * 1000, kmh=kmh, odometer_m=odometer,
                              ignition=kmh > 0)
        for rec in (
            make_record("speed", BUS, ts, kmh=kmh, odometer_m=odometer, ignition=kmh > 0,
                        device_seq=n + 1, raw=frame.hex()),
            make_record("position", BUS, ts, lat=round(-23.5 + odometer * 9e-6, 6),
                        lon=-46.6, kmh=kmh, course=90.0),
        ):
            seq += 1
            rec = {**rec, "agent": "9b2f0c4e-0000-4000-8000-000000000001", "seq": seq,
                   "prev": prev}
            prev = record_hash(rec)
            out.append(rec)
    return out


def rows(recs: list[dict[str, Any]], twice: bool) -> list[tuple[Any, ...]]:
    """The store's rows; ``twice``: ``raw`` also in its own column, as before."""
    out = []
    for rec in recs:
        row = record_row(rec, T0)
        if twice:
            row = (*row[:8], rec.get("raw"), *row[9:])
        out.append(row)
    return out


def sqlite_bytes(recs: list[dict[str, Any]], twice: bool) -> int:
    """The SQLite file's size after VACUUM."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.db"
        store = open_store(str(path))
        store.put(rows(recs, twice))
        store.db.execute("VACUUM")  # type: ignore[attr-defined]
        store.close()
        return path.stat().st_size


def postgres_bytes(dsn: str, recs: list[dict[str, Any]], twice: bool) -> int:
    """The records table's total size (indexes, TOAST) after VACUUM FULL, in a fresh schema."""
    with private_schema(dsn, "bench") as (url, schema):
        store = open_store(url)
        store.put(rows(recs, twice))
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"VACUUM FULL {schema}.records".encode())
            row = conn.execute(
                f"SELECT pg_total_relation_size('{schema}.records')".encode()).fetchone()
            return int(row[0]) if row else 0


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=21_600)
    parser.add_argument("--postgres", metavar="DSN")
    args = parser.parse_args()
    recs = records(args.seconds)
    count = len(recs)
    json_bytes = sum(len(orjson.dumps(r)) for r in recs) / count
    raw_chars = sum(len(r.get("raw", "")) for r in recs) / count
    print(f"bench.bytes_at_rest: {count:,} records ({args.seconds:,} s of one bus: speed with its "
          f"registrador frame + position, chained); record JSON {json_bytes:.1f} bytes/record, "
          f"of which raw {raw_chars:.1f} characters (on the speed records: half of them)")
    backends: list[tuple[str, Callable[[bool], int]]] = [
        ("SQLite file after VACUUM", lambda twice: sqlite_bytes(recs, twice))]
    if args.postgres:
        dsn = args.postgres
        backends.append(("PostgreSQL records, total relation size",
                         lambda twice: postgres_bytes(dsn, recs, twice)))
    for name, measure in backends:
        before, now = measure(True) / count, measure(False) / count
        print(f"  {name}: raw twice (before) {before:,.1f} bytes/record, raw once (now) "
              f"{now:,.1f} bytes/record: {before - now:,.1f} saved ({now / before:.3f}x)")


if __name__ == "__main__":
    main()
