"""Uplink payload encodings on realistic batches: size and CPU (encode on the Pi, decode at the collector).

``.venv/bin/python -m bench.uplink_encoding``: 500-record batches of one bus's records (registrador
status and GPS fixes with their ``raw`` hex, door counts), encoded as JSON, zstd-compressed JSON
(levels 1, 3, 9), msgpack and zstd-compressed msgpack. Prints bytes per record, compression
ratio, and µs per record to encode and to decode, with JSON as the baseline of the same run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack
import zstandard

from bench.busday import day_of_records
from bench.common import best_seconds
from protocols.uplink import encode_batch_json

BATCH = 500
REPEAT = 9  # runs per case, the best kept


def _json(batch: list[dict[str, Any]]) -> bytes:
    return json.dumps({"schema": 1, "records": batch}, separators=(",", ":")).encode()


def main() -> None:
    """Measure and print the table."""
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
    base_size = base_enc = 0.0
    print(f"{n} records in batches of {BATCH}")
    print(f"{'encoding':<14} {'B/record':>9} {'ratio':>7} {'enc µs/rec':>11} {'dec µs/rec':>11} {'enc ×json':>10}")
    for name, (enc, dec) in encoders.items():
        payloads = [enc(b) for b in batches]
        size = sum(len(p) for p in payloads) / n
        t_enc = best_seconds(lambda enc=enc: [enc(b) for b in batches], REPEAT) / n * 1e6  # type: ignore[misc]
        t_dec = best_seconds(lambda dec=dec, payloads=payloads: [dec(p) for p in payloads], REPEAT) / n * 1e6  # type: ignore[misc]
        if name == "json":
            base_size, base_enc = size, t_enc
        print(
            f"{name:<14} {size:9.1f} {base_size / size:7.2f} {t_enc:11.2f} {t_dec:11.2f} "
            f"{t_enc / base_enc:10.2f}"
        )


    # What the agent really does: the stored JSON of each record spliced, then zstd level 3.
    bodies = [[json.dumps(r, separators=(",", ":")) for r in b] for b in batches]
    t_enc = best_seconds(
        lambda: [encode_batch_json("ABC1D23", "a", b) for b in bodies], REPEAT
    ) / n * 1e6
    size = sum(len(encode_batch_json("ABC1D23", "a", b)) for b in bodies) / n
    print(
        f"{'agent path':<14} {size:9.1f} {base_size / size:7.2f} {t_enc:11.2f} {'':>11} "
        f"{t_enc / base_enc:10.2f}   (stored JSON spliced + zstd3: encode_batch_json)"
    )


if __name__ == "__main__":
    main()
