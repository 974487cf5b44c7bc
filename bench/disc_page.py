"""The *Disco do dia* page served from a year-long store, against reading the same day's rows.

    python -m bench.disc_page [--buses 20] [--days 365] [--raw-days 1] [--repeat 3]
                              [--keep DB | --reuse DB] [--no-summary]

(``--raw-days 0``: no day as rows; the rows arms are left out.)

The timed compacted day, the day before it and the day before the last day (the day as rows
reads who was driving at its midnight there) get the summary the compaction job writes beside a
day (collector/disc_summary.py; bench.longstore's replicated days are written without one) unless
``--no-summary``: the page of a day without one reads its columns (the figures before
migration ``017_disc_summary``).

The store is :mod:`bench.longstore`'s: ``buses`` × ``days`` vehicle-days at 1 Hz (bench.check's
bus-day: a ``speed`` and a ``position`` record each second, two trips with their drivers, stops),
all but the last ``raw_days`` compacted into one ``disc_days`` row each — what a collector holds
after a year with compaction on (issue 15 item 6) — the last days as rows. The default is the
issue's store, a year of a 20-bus fleet (7,300 vehicle-days, 1.26 billion records).

Then, in interleaved rounds (``--repeat``, at least 3), for BUS of the middle:

- a compacted day in the middle of the year: the page cold (the process's caches of decoded
  and projected days emptied just before, in an arm of its own: freeing a decoded day the
  baseline left there is not the page's time; a day nobody looked at), the page again (warm), and the
  baseline: ``Store.records`` of the same vehicle-day cold (its rows back: the day decoded) and
  warm;
- the last day (rows): the page (from the per-minute summary the ingest keeps,
  collector/speed_minutes.py), the page read from the rows (as before migration 020), and
  ``Store.records`` of that day (every row read).

Each page is ``GET /disco/VEHICLE?dia=DAY`` over a real socket (uvicorn, the collector's app, in
this process so that the caches can be emptied). Printed: the median and spread of each in ms,
each page's ratio to its baseline, and the targets (issue 17: at most 200 ms, goal 100 ms).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Generator
from datetime import date, timedelta
from pathlib import Path

import httpx
import uvicorn

from bench.common import add_repeat, host_line, interleaved, target
from bench.longstore import FIRST_DAY, build, fleet_registry
from collector import disc_columns, disc_summary, speed_minutes, store_disc
from collector.http import make_app
from collector.ingest import Ingest
from collector.rules.profile import DEFAULT_PROFILE, load_profiles
from collector.store import open_store
from collector.web.context import RegistryFile, Web
from collector.web.localtime import Day

TARGET_MS, GOAL_MS = 200.0, 100.0


def _cold() -> None:
    """Empty the process's caches of decoded (store_disc) and projected (disc_columns) days."""
    store_disc.clear_cache()
    disc_columns.clear_cache()


def _registry(folder: Path, buses: int) -> Path:
    path = folder / "fleet.json"
    path.write_text(json.dumps(fleet_registry(buses)))
    return path


def _serve(db: Path, registry: Path, buses: int) -> Generator[str, None, None]:
    store = open_store(str(db), create=False)
    names = frozenset(f"BUS{b:02d}" for b in range(buses))
    ingest = Ingest(store, lambda: names)
    web = Web(store, RegistryFile(registry), load_profiles(), ingest, None)
    app = make_app(ingest, lambda: names, web=web)
    sock_port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=sock_port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock_port}"
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _summarize(db: Path, vehicle: str, days: list[date]) -> None:
    """Write the summary the compaction job writes (collector/disc_summary.py) on the timed days
    and the day before each (its driver at midnight: for the day as rows, the last compacted
    day) where bench.longstore's replicated rows lack it; the page reads one row by its key, so
    the days left without one change nothing timed."""
    store = open_store(str(db), create=False)
    try:
        stop_kmh = load_profiles()[DEFAULT_PROFILE].stop_kmh
        for one in sorted({d - timedelta(days=back) for d in days for back in (1, 0)}):
            found = [d for d in store_disc.days(store, vehicle) if d.day == one.isoformat()]
            if found and disc_summary.read(store, vehicle, one.isoformat()) is None:
                disc_summary.add(store, found[0], stop_kmh)
                print(f"summarized {vehicle} {one} (compacted without a summary)")
        if speed_minutes.is_pending(store, vehicle):  # its rows stored before migration 020
            speed_minutes.rebuild(store, vehicle, stop_kmh)
            print(f"summarized {vehicle}'s rows per minute (stored before the summary)")
    finally:
        store.close()


def main() -> None:
    """Build (or reuse) the store, then time the pages and the baselines."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--buses", type=int, default=20)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--raw-days", type=int, default=1)
    parser.add_argument("--keep", type=Path, metavar="DB", help="build the store here and keep it")
    parser.add_argument("--reuse", type=Path, metavar="DB", help="a store --keep built")
    parser.add_argument("--no-summary", action="store_true",
                        help="leave the timed day and the day before without their summaries")
    add_repeat(parser)
    args = parser.parse_args()
    if args.raw_days < 0 or args.days <= args.raw_days:
        parser.error("--days must exceed --raw-days (a compacted day is timed)")
    with tempfile.TemporaryDirectory(prefix="disc-page-") as tmp:
        folder = Path(tmp)
        db = args.reuse or args.keep or folder / "store.db"
        if args.reuse is None:
            made = build(str(db), args.buses, args.days, raw_days=args.raw_days, log=True)
            print(f"built {args.buses} buses x {args.days} days ({args.raw_days} as rows): "
                  f"{made.records:,} records, {db.stat().st_size / 1e9:.2f} GB in "
                  f"{made.seconds:.0f} s")
        vehicle = f"BUS{args.buses // 2:02d}"
        tz = load_profiles()["SP"].tz
        packed = FIRST_DAY.fromordinal(FIRST_DAY.toordinal() + (args.days - args.raw_days) // 2)
        raw = FIRST_DAY.fromordinal(FIRST_DAY.toordinal() + args.days - 1)
        if not args.no_summary:
            _summarize(db, vehicle, [packed, raw] if args.raw_days else [packed])
        reader = open_store(str(db), create=False, read_only=True)
        served = _serve(db, _registry(folder, args.buses), args.buses)
        base = next(served)  # a generator: closing it stops the server
        try:
            with httpx.Client(base_url=base, timeout=300) as client:
                for day in (packed, raw) if args.raw_days else (packed,):
                    page = client.get(f"/disco/{vehicle}?dia={day}")
                    assert page.status_code == 200, page.text[:300]
                    assert "Disco do dia" in page.text

                def get(day: object) -> Callable[[], int]:
                    def run() -> int:
                        return len(client.get(f"/disco/{vehicle}?dia={day}").content)
                    return run

                def rows(day: object) -> Callable[[], int]:
                    local = Day.of(day, tz)  # type: ignore[arg-type]

                    def run() -> int:
                        return sum(1 for _ in reader.records(vehicle, local.lo_ms, local.hi_ms))
                    return run

                def without_minutes(run: Callable[[], int]) -> Callable[[], int]:
                    """The page drawn from the day's rows (as before migration 020)."""
                    def patched() -> int:
                        kept = speed_minutes.read_day
                        speed_minutes.read_day = lambda *_: None
                        try:
                            return run()
                        finally:
                            speed_minutes.read_day = kept
                    return patched

                # the caches emptied in an arm of their own, just before each cold arm: freeing
                # a decoded day (172,814 rows) takes 0.1-0.2 s, the previous arm's, not the page's
                arms = {"empty": _cold, "page_cold": get(packed),
                        "page_warm": get(packed),
                        "empty_again": _cold, "rows_cold": rows(packed),
                        "rows_warm": rows(packed)}
                if args.raw_days:
                    arms |= {"raw_page": get(raw), "raw_rows": rows(raw),
                             "raw_page_rows": without_minutes(get(raw))}
                figures, results = interleaved(arms, args.repeat)
        finally:
            served.close()
            reader.close()
    ms = {name: f.scaled(1000) for name, f in figures.items()}

    def line(label: str, name: str, targets: bool = False) -> None:
        text = f"{label:<46}{ms[name].show('{:,.1f}'):>28} ms"
        if targets:
            text += (f"   target <= {TARGET_MS:.0f} ms: {target(ms[name].median <= TARGET_MS)}; "
                     f"goal <= {GOAL_MS:.0f} ms: {target(ms[name].median <= GOAL_MS)}")
        print(text)

    print(f"{vehicle}, compacted day {packed}: {results['rows_cold']:,} records; page "
          f"{results['page_warm']:,} bytes")
    line("compacted day: page, cold", "page_cold", True)
    line("compacted day: page, warm", "page_warm", True)
    line("compacted day: Store.records, cold (decoded)", "rows_cold")
    line("compacted day: Store.records, warm", "rows_warm")
    line("(untimed above: emptying the caches before a cold arm)", "empty")
    pairs = [("page_cold", "rows_cold"), ("page_warm", "rows_warm")]
    if args.raw_days:
        print(f"last day {raw} (rows): {results['raw_rows']:,} records")
        line("day as rows: page (per-minute summary)", "raw_page", True)
        line("day as rows: page read from the rows", "raw_page_rows", True)
        line("day as rows: Store.records (every row read)", "raw_rows")
        pairs += [("raw_page", "raw_rows"), ("raw_page_rows", "raw_rows")]
    for page_arm, rows_arm in pairs:
        print(f"{page_arm} / {rows_arm}: "
              f"{figures[page_arm].ratio(figures[rows_arm]).show('{:.2f}')}")
    print(host_line())


if __name__ == "__main__":
    main()
