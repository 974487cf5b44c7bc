"""A simulated fleet against real collectors: latency from a record's creation to its stored
acknowledgement, and nothing lost (issue 16, "2,000 simulated buses at 1 Hz").

    python -m bench.fleet --vehicles 50,200 --duration 60 [--collectors 2 --postgres DSN]

Each round starts a private Mosquitto and the collectors (on a fresh PostgreSQL schema, members of
one shared-subscription group, docs/deployment.md; or one collector on SQLite without
``--postgres``), runs ``frota sim fleet`` as its own process, and reads its report. The fleet sizes
are interleaved round by round; the median and spread of each figure over the rounds is printed
with the issue's target beside. The latency stops at the acknowledgement, which the collector sends
after its commit: stored, not evaluated (the live rules run after the commit, apart).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from bench.common import Figure, add_repeat, host_line, target
from frota.harness import CollectorProcess, Mosquitto, free_port, frota_argv
from frota.harness.postgres import private_schema
from simulators.fleet import registry

#: Issue 16: p99 ≤ the batch interval + 2 s (goal + 0.5 s); the agent's batch interval is 1 s.
BATCH_INTERVAL_S: Final = 1.0
TARGET_MS: Final = (BATCH_INTERVAL_S + 2.0) * 1000
GOAL_MS: Final = (BATCH_INTERVAL_S + 0.5) * 1000


@contextmanager
def _schema(dsn: str) -> Iterator[str]:
    """A fresh schema in PostgreSQL for one run; the DSN that uses it (dropped afterwards)."""
    with private_schema(dsn, "bench") as (url, _):
        yield url


def _collector(folder: Path, broker: str, vehicles: int, name: str, database: str,
               group: str | None) -> CollectorProcess:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.json").write_text(json.dumps(registry(vehicles)), encoding="utf-8")
    port = free_port()
    shared = f'share_group = "{group}"\n' if group else ""
    (folder / "collector.toml").write_text(
        'registry = "fleet.json"\nlog_level = "WARNING"\n'
        f'[broker]\nurl = "{broker}"\nclient_id = "bench-{name}"\n{shared}'
        f"[database]\n{database}\n"
        f'[http]\nhost = "127.0.0.1"\nport = {port}\n',
        encoding="utf-8",
    )
    return CollectorProcess(folder / "collector.toml", port)


def _round(work: Path, vehicles: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``vehicles`` buses; the simulator's report."""
    broker = Mosquitto(work / "broker")
    broker.start()
    try:
        with _store(args.postgres, work) as database:
            group = "bench" if args.collectors > 1 else None
            collectors = [_collector(work / f"c{i}", broker.url, vehicles, f"c{i}", database, group)
                          for i in range(args.collectors)]
            for collector in collectors:
                collector.start()
            try:
                argv = frota_argv("sim", "fleet", "--vehicles", str(vehicles), "--rate",
                                  str(args.rate), "--duration", str(args.duration), "--broker",
                                  broker.url, "--json")
                done = subprocess.run(argv, capture_output=True, text=True, check=False,
                                      timeout=args.duration + 600)
                if not done.stdout.strip():
                    raise RuntimeError(f"frota sim fleet printed nothing: {done.stderr[-500:]}")
                report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
                return report
            finally:
                for collector in collectors:
                    collector.stop()
    finally:
        broker.stop()


@contextmanager
def _store(dsn: str | None, work: Path) -> Iterator[str]:
    """The ``[database]`` lines: a fresh PostgreSQL schema, or a SQLite file in ``work``."""
    if dsn is None:
        yield f'path = "{work / "collector.db"}"'
        return
    with _schema(dsn) as url:
        yield f'dsn = "{url}"'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vehicles", default="50,200", metavar="N,N",
                        help="fleet sizes, comma-separated (default 50,200)")
    parser.add_argument("--rate", type=float, default=1.0, metavar="HZ")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S")
    parser.add_argument("--collectors", type=int, default=1, metavar="K",
                        help="collectors in one shared-subscription group (needs --postgres "
                        "when more than 1)")
    parser.add_argument("--postgres", metavar="DSN", help="store in PostgreSQL (fresh schema)")
    add_repeat(parser)
    args = parser.parse_args()
    if args.collectors > 1 and args.postgres is None:
        parser.error("--collectors above 1 share one store: give --postgres DSN")
    sizes = [int(n) for n in args.vehicles.split(",")]
    reports: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for i in range(args.repeat):
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
                reports[n].append(_round(Path(tmp), n, args))
            print(f"  round {i + 1}, {n} buses: {json.dumps(reports[n][-1])}", flush=True)
    store = f"PostgreSQL, {args.collectors} collector(s)" if args.postgres else "SQLite, 1 collector"
    print(f"frota sim fleet, {args.rate:g} Hz for {args.duration:g} s, {store}; "
          f"{args.repeat} interleaved rounds, median (spread); latency creation -> stored ack, ms")
    for n in sizes:
        got = reports[n]
        p50 = Figure(tuple(r["latency_ms"]["p50"] or 0.0 for r in got))
        p99 = Figure(tuple(r["latency_ms"]["p99"] or 0.0 for r in got))
        lost = sum(r["unanswered"] for r in got)
        stored = Figure(tuple(float(r["stored"]) for r in got))
        print(f"  {n:>5} buses: p50 {p50.show()}  p99 {p99.show()}  stored {stored.show()}  "
              f"unanswered {lost}  (issue 16 target p99 <= {TARGET_MS:,.0f} ms: "
              f"{target(p99.median <= TARGET_MS and lost == 0)}; goal {GOAL_MS:,.0f} ms: "
              f"{target(p99.median <= GOAL_MS and lost == 0)})")
    print(host_line())


if __name__ == "__main__":
    main()
