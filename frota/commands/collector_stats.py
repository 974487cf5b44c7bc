"""``frota collector stats``: monthly passengers transported and trips made per line (BA 35 II),
with passenger-km, seat-km, the occupancy index and the timetable's scheduled and run trips, as
JSON Lines or CSV (collector/stats.py)."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from frota.errors import UserError


def add_subcommand(sub: Any) -> None:
    """Add ``stats`` under ``frota collector``."""
    stats = sub.add_parser(
        "stats",
        help="monthly trips, passengers, passenger-km and index per line (JSON Lines or CSV)",
        description="Monthly statistics per line computed by the rules engine over the stored "
        "records (BA 35 II: passengers transported and trips made): a line's month is local "
        "(its profile's time zone) and a trip counts in the month it started.",
    )
    source = stats.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="the collector's TOML configuration")
    source.add_argument("--db", metavar="PATH",
                        help="a SQLite database file (or a postgresql:// DSN); needs --registry")
    stats.add_argument("--registry", metavar="FILE",
                       help="the fleet registry (default: the one named in --config)")
    stats.add_argument("--month", required=True, metavar="YYYY-MM", help="the month")
    stats.add_argument("--line", metavar="ID", help="only this line")
    stats.add_argument("--csv", action="store_true", help="CSV with a header instead of JSON Lines")
    stats.set_defaults(func=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    """Print the month's statistics."""
    from collector import registry as fleet
    from collector.findings import engine_of_store
    from collector.stats import FIELDS, StatsError, monthly
    from collector.store import StoreError, open_store
    from frota.commands.collector import _config
    from protocols.fields import now_ms
    from protocols.records import dumps

    config = _config(args.config) if args.config is not None else None
    registry_path = args.registry or (config.registry if config is not None else None)
    if registry_path is None:
        raise UserError("--db needs --registry FILE (the fleet registry)")
    try:
        registry = fleet.load(registry_path)
    except fleet.RegistryError as err:
        raise UserError(f"fleet registry: {err}") from None
    url = args.db if config is None else config.database.url
    as_of = now_ms()
    try:
        store = open_store(url, create=False)
    except StoreError as err:
        raise UserError(str(err)) from err
    try:
        engine = engine_of_store(store, registry, as_of)
        rows = monthly(engine, registry, args.month, as_of, args.line)
    except StatsError as err:
        raise UserError(str(err)) from None
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    if args.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    else:
        for row in rows:
            sys.stdout.write(dumps(row) + "\n")
    sys.stdout.flush()
    return 0
