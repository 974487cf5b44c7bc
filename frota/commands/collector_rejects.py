"""``frota collector rejects replay``: stored rejects whose cause is fixed, ingested again
(docs/collector.md, "Rejects replayed")."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from frota.errors import UserError


def add_subcommands(sub: Any) -> None:
    """Add ``rejects replay`` to ``frota collector``."""
    rejects = sub.add_parser("rejects", help="the payloads the collector refused",
                             description="The payloads (or records) the collector refused, kept "
                             "in its store with their reasons.")
    what = rejects.add_subparsers(dest="rejects_command", metavar="ACTION")
    what.required = True
    replay = what.add_parser(
        "replay", help="ingest again the stored rejects whose cause is fixed",
        description="Read every stored reject again as the ingest would now (e.g. a vehicle "
        "added to the registry since): what is accepted is stored, exactly once, and the reject "
        "marked replayed; what may still change (unknown vehicle) is left for later; what never "
        "can (malformed, refused for its content) is marked final and not tried again.")
    replay.add_argument("--config", required=True, metavar="FILE",
                        help="the collector's TOML configuration")
    replay.add_argument("--vehicle", metavar="ID", help="only this vehicle's rejects")
    replay.add_argument("--dry-run", action="store_true", help="say what would happen, store nothing")
    replay.set_defaults(func=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    """Replay the stored rejects and say what became of them."""
    from collector import registry
    from collector.rejects_replay import replay
    from collector.store import StoreError, open_store
    from frota.commands.collector import _config
    from protocols.records import now_ms

    config = _config(args.config)
    try:
        known = frozenset(registry.load(config.registry).vehicles)
    except registry.RegistryError as err:
        raise UserError(f"fleet registry: {err}") from err
    try:
        store = open_store(config.database.url, create=False)
    except StoreError as err:
        raise UserError(str(err)) from err
    try:
        report = replay(store, lambda: known, now_ms(), vehicle=args.vehicle,
                        dry_run=args.dry_run, max_payload_bytes=config.ingest.max_payload_bytes)
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    verb = "would store" if args.dry_run else "stored"
    print(f"{report.replayed} rejects accepted now: {verb} {report.stored_records} records "
          f"({report.duplicates} already stored); {report.still_retryable} still refused for a "
          f"cause that may change; {report.final} final")
    for reason, count in sorted(report.reasons.items(), key=lambda item: -item[1])[:10]:
        print(f"  {count} × {reason}", file=sys.stderr)
    return 0
