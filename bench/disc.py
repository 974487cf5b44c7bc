"""The digital disc at rest (issue 15 item 6): bytes per record of a compacted vehicle-day
against its raw rows, compaction speed, and reading a day back against reading its rows.

    python -m bench.disc [--seconds 86400] [--repeat 3]

The day: a bus at 1 Hz for ``--seconds`` (a registrador speed sample with its frame bytes and a
GPS position each second, chained by ``prev`` as the agent does). Raw rows: the same records in a
fresh SQLite store (``collector.store``), the database file's bytes per record after VACUUM
(indexes included). Compacted: :func:`collector.disc.encode_day`'s blob, chain included (each
``prev`` is rebuilt on decode). Reading back: :func:`collector.disc.decode_day` against
``Store.records`` over the day's rows. Every timing is ``--repeat`` interleaved rounds, printed
as median (low-high, n). Targets: <= 8 bytes per record at rest (goal <= 4).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import orjson

from bench.common import Figure, add_repeat, host_line, interleaved, target
from collector.disc import decode_day, encode_day
from collector.store import open_store, record_row
from protocols.chain import GENESIS, record_hash
from protocols.records import make_record, ms_to_ts, ts_to_ms

T0 = ts_to_ms("2026-11-20T03:00:00Z")
BUS = "ABC1D23"


def day(seconds: int) -> list[str]:
    """The day's record texts in (ts, seq) order."""
    prev, seq, texts = GENESIS, 0, []
    odometer = 0
    for n in range(seconds):
        ts = ms_to_ts(T0 + n * 1000)
        kmh = float((n // 60) % 90)                     # a minute at each speed, 0-89 km/h
        odometer += int(kmh / 3.6)
        for rec in (
            make_record("speed", BUS, ts, kmh=kmh, odometer_m=odometer, ignition=kmh > 0,
                        device_seq=n + 1, raw=f"aa5511{(n + 1) & 0xFFFF:04x}{int(kmh):02x}"
                        f"{odometer & 0xFFFFFF:06x}00"),
            make_record("position", BUS, ts, lat=round(-23.5 + odometer * 9e-6, 6),
                        lon=-46.6, kmh=kmh, course=90.0),
        ):
            seq += 1
            rec = {**rec, "agent": "9b2f0c4e-0000-4000-8000-000000000001", "seq": seq,
                   "prev": prev}
            prev = record_hash(rec)
            texts.append(orjson.dumps(rec).decode())
    return texts


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=86_400, help="seconds of the day")
    add_repeat(parser)
    args = parser.parse_args()
    texts = day(args.seconds)
    count = len(texts)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "raw.db"
        store = open_store(str(path))
        store.put([record_row(orjson.loads(t), T0) for t in texts])
        store.db.execute("VACUUM")  # type: ignore[attr-defined]
        raw_bytes = path.stat().st_size
        json_bytes = sum(len(t) for t in texts)
        blob = encode_day(texts)
        assert decode_day(blob) == texts, "the day does not decode back byte for byte"

        def read_rows() -> int:
            return sum(1 for _ in store.records(BUS))

        seconds, _ = interleaved({"encode": lambda: encode_day(texts),
                                  "decode": lambda: decode_day(blob),
                                  "rows": read_rows}, args.repeat)
        store.close()
    per_record = len(blob) / count
    print(f"bench.disc: one vehicle-day, {count:,} records ({args.seconds:,} s at 1 Hz, speed "
          "with frame bytes + position, chained)")
    print(f"  raw rows (SQLite file, indexes, after VACUUM): {raw_bytes / count:,.1f} bytes/record"
          f" (record JSON alone {json_bytes / count:,.1f})")
    print(f"  compacted day (zstd, chain included):          {per_record:,.2f} bytes/record — "
          f"ratio to raw rows {per_record / (raw_bytes / count):.4f}; target <= 8: "
          f"{target(per_record <= 8)}, goal <= 4: {target(per_record <= 4)}")
    enc: Figure = seconds["encode"].per(count)
    dec: Figure = seconds["decode"].per(count)
    rows: Figure = seconds["rows"].per(count)
    print(f"  compaction speed: {enc.show()} records/s")
    print(f"  reading the day back: compacted {dec.show()} records/s; raw rows {rows.show()} "
          f"records/s; ratio {dec.ratio(rows).show('{:.2f}')}")
    print(host_line())


if __name__ == "__main__":
    main()
