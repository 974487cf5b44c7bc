"""What the *Disco do dia*'s per-minute summary (collector/speed_minutes.py) costs the ingest.

    python -m bench.ingest_minutes [--records 20000] [--batch 100] [--repeat 5]

:meth:`Ingest.handle` alone (bench.collector_ingest's ``Ingest.handle only``: its chained records,
a speed and a position sample each 0.5 s, in zstd batches each with a signed checkpoint, into a
fresh SQLite store, the live chain verifier checking them) with the summary's update on and
switched off (``speed_minutes.add`` a no-op: the ingest as before migration 020), interleaved
round by round in one process. Printed: records/s and the process's CPU time per record (the
store's commits wait for the disk: on a shared host the CPU time is the steadier figure),
median and spread, of each.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.collector_ingest import AGENT, VEHICLE, _batches, _handle_only, _records, make_trust
from bench.common import Figure, add_repeat, host_line
from collector import speed_minutes
from protocols.uplink import encode_batch


def main() -> None:
    """Time the ingest with and without the per-minute summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    add_repeat(parser, 5)
    args = parser.parse_args()
    real = speed_minutes.add

    def off(*_: Any) -> None:
        return None

    arms: dict[str, Callable[..., None]] = {"with the summary": real, "without": off}
    rates: dict[str, list[float]] = {name: [] for name in arms}
    cpu_us: dict[str, list[float]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trust = make_trust(folder)
        payloads = [encode_batch(VEHICLE, AGENT, chunk, checkpoint=cp)
                    for chunk, cp in _batches(_records(args.records), args.batch, trust.key)]
        for run in range(args.repeat):
            for at, (name, add) in enumerate(arms.items()):
                speed_minutes.add = add
                where = folder / f"run{run}-{at}"
                where.mkdir()
                cpu = time.process_time()
                try:
                    rates[name].append(_handle_only(payloads, args.records, where, trust))
                    cpu_us[name].append((time.process_time() - cpu) / args.records * 1e6)
                finally:
                    speed_minutes.add = real
    print(f"Ingest.handle alone, {args.records:,} records in batches of {args.batch}:")
    for name, got in rates.items():
        print(f"  {name:<18}{Figure(tuple(got)).show('{:,.0f}'):>34} records/s, "
              f"{Figure(tuple(cpu_us[name])).show('{:.1f}')} µs of CPU per record")
    print(host_line())


if __name__ == "__main__":
    main()
