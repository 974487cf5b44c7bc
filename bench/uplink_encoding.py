"""Uplink payload encodings on realistic batches: size and CPU (encode on the Pi, decode at the collector).

``.venv/bin/python -m bench.uplink_encoding [--repeat 3]``: 500-record batches of one bus's records (registrador
status and GPS fixes with their ``raw`` hex, door counts), encoded as JSON, zstd-compressed JSON
(levels 1, 3, 9), msgpack and zstd-compressed msgpack. Prints bytes per record, compression
ratio, and µs per record to encode and to decode, with JSON as the baseline of the same run.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import msgpack
import zstandard

from bench.busday import day_of_records
from bench.common import add_repeat, host_line, interleaved
from protocols.uplink import encode_batch_json

BATCH = 500


def _json(batch: list[dict[str, Any]]) -> bytes:
    return json.dumps({"schema": 1, "records": batch}, separators=(",", ":")).encode()


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_repeat(parser)
    args = parser.parse_args()
    records = [rec for _, rec in day_of_records(20_000)]
    for i, rec in enumerate(records, start=1):
        rec["agent"] = "9b2f0c4e-6a51-4d0e-8f43-0d6c2e7a1b55"
        rec["seq"] = i
    batches = [records[i : i + BATCH] for i in range(0, len(records), BATCH)]
    n = len(records)
    zc = {level: zstandard.ZstdCompressor(level=level) for level in (1, 3, 9)}
    zd = zstandard.ZstdDecompressor()
    encoders: dict[str, tuple[Callable[[list[dict[str, Any]]], bytes], Callable[[bytes], object]]] = {
        "json": (_json, json.loads),
        "json+zstd1": (lambda b: zc[1].compress(_json(b)), lambda p: json.loads(zd.decompress(p))),
        "json+zstd3": (lambda b: zc[3].compress(_json(b)), lambda p: json.loads(zd.decompress(p))),
        "json+zstd9": (lambda b: zc[9].compress(_json(b)), lambda p: json.loads(zd.decompress(p))),
        "msgpack": (
            lambda b: msgpack.packb({"schema": 1, "records": b}),
            lambda p: msgpack.unpackb(p),
        ),
        "msgpack+zstd3": (
            lambda b: zc[3].compress(msgpack.packb({"schema": 1, "records": b})),
            lambda p: msgpack.unpackb(zd.decompress(p)),
        ),
    }
    # What the agent really does: the stored JSON of each record spliced, then zstd level 3.
    bodies = [[json.dumps(r, separators=(",", ":")) for r in b] for b in batches]
    payloads = {name: [enc(b) for b in batches] for name, (enc, _) in encoders.items()}
    runs: dict[str, Callable[[], object]] = {}
    for name, (enc, dec) in encoders.items():
        runs[f"{name} enc"] = lambda enc=enc: [enc(b) for b in batches]  # type: ignore[misc]
        runs[f"{name} dec"] = lambda dec=dec, p=payloads[name]: [dec(x) for x in p]  # type: ignore[misc]
    runs["agent path enc"] = lambda: [encode_batch_json("ABC1D23", "a", b) for b in bodies]
    seconds, _ = interleaved(runs, args.repeat)
    per_record = {name: fig.scaled(1e6 / n) for name, fig in seconds.items()}
    base_size = sum(len(p) for p in payloads["json"]) / n
    base_enc = per_record["json enc"]
    print(f"{n} records in batches of {BATCH}; {args.repeat} interleaved repeats, median (spread); "
          "no target set by an issue")
    for name in [*encoders, "agent path"]:
        if name == "agent path":
            size = sum(len(encode_batch_json("ABC1D23", "a", b)) for b in bodies) / n
        else:
            size = sum(len(p) for p in payloads[name]) / n
        enc_us = per_record[f"{name} enc"]
        dec_us = per_record.get(f"{name} dec")
        print(f"  {name:<14} {size:7.1f} B/record, {base_size / size:5.2f}x smaller than JSON; "
              f"encode {enc_us.show('{:.2f}')} µs/record ({enc_us.ratio(base_enc).show('{:.2f}')}x "
              f"JSON)" + (f"; decode {dec_us.show('{:.2f}')} µs/record" if dec_us else ""))
    print("  (agent path: the stored JSON spliced + zstd 3, encode_batch_json)")
    print(host_line())


if __name__ == "__main__":
    main()
