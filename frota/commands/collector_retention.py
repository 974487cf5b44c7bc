"""``frota collector prune``, ``frota collector compact`` and ``frota collector hold
add|release|list`` (docs/collector.md, "Retention", "The digital disc at rest" and "Legal
holds")."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from frota.errors import UserError


def add_subcommands(sub: Any) -> None:
    """Add ``prune``, ``compact`` and ``hold`` to ``frota collector``."""
    prune = sub.add_parser(
        "prune",
        help="delete records older than the keeping period (never younger than the law's minimum)",
        description="Delete the records older than the keeping period ([retention] keep_days, "
        "never shorter than the profile's minimum: SP 365 days, Decreto SP 29.913/1989 art. 61 "
        "§3; TO 90 days, Regulamento TO art. 66 §1; BA 365 days), counted by whole local days "
        "from each record's device time; held periods are kept. The only way records are deleted.",
    )
    prune.add_argument("--config", required=True, metavar="FILE",
                       help="the collector's TOML configuration")
    prune.add_argument("--dry-run", action="store_true",
                       help="say what would be deleted, delete nothing")
    prune.set_defaults(func=run_prune)

    compact = sub.add_parser(
        "compact",
        help="compact vehicle-days older than a few days into one row each (the digital disc)",
        description="Compact each vehicle-day older than [retention] compact_after_days whole "
        "local days (default 2) into one row: the day's records columnar, delta-encoded and "
        "zstd-compressed, the hash chain kept. Every reader reads them back as before; a "
        "record's rows are deleted only after its day is written and decoded back identical, "
        "in the same transaction. Nothing is lost: prune alone deletes records. Days "
        "compacted without the Disco do dia's summary (before migration 017) get it.",
    )
    compact.add_argument("--config", required=True, metavar="FILE",
                         help="the collector's TOML configuration")
    compact.add_argument("--dry-run", action="store_true",
                         help="say what would be compacted (and its size), change nothing")
    compact.add_argument("--older-than-days", type=int, metavar="N",
                         help="compact days older than N whole local days (default: "
                         "[retention] compact_after_days)")
    compact.set_defaults(func=run_compact)

    hold = sub.add_parser("hold", help="legal holds: periods no prune deletes",
                          description="Legal holds: a vehicle's period kept whatever its age "
                          "until released (an accident, a lawsuit, an inspector's request).")
    what = hold.add_subparsers(dest="hold_command", metavar="ACTION")
    what.required = True
    add = what.add_parser("add", help="hold a vehicle's period",
                          description="Hold a vehicle's period (SINCE <= ts < UNTIL): no prune "
                          "deletes it until the hold is released. Recorded with who and when.")
    _source(add)
    add.add_argument("--vehicle", required=True, metavar="ID", help="the vehicle id")
    add.add_argument("--since", required=True, metavar="TS",
                     help="RFC 3339 time or a date (local), inclusive")
    add.add_argument("--until", required=True, metavar="TS",
                     help="RFC 3339 time or a date (local), exclusive")
    add.add_argument("--reason", required=True, metavar="TEXT", help="why the period is held")
    add.add_argument("--by", metavar="NAME", help="who holds it (default: the OS user)")
    add.set_defaults(func=run_hold_add)
    release = what.add_parser("release", help="release a hold (it stays listed)",
                              description="Release a hold: its period may be pruned again once "
                              "past the keeping period. The hold stays listed, with who and when.")
    _source(release)
    release.add_argument("id", type=int, help="the hold's number (hold list)")
    release.add_argument("--by", metavar="NAME", help="who releases it (default: the OS user)")
    release.set_defaults(func=run_hold_release)
    listing = what.add_parser("list", help="list the holds, released ones included",
                              description="Every hold, oldest first, active or released, with "
                              "who made (and released) it and when.")
    _source(listing)
    listing.set_defaults(func=run_hold_list)


def _source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="the collector's TOML configuration")


def _who(by: str | None) -> str:
    if by is not None and by.strip():
        return by.strip()
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def _open(path: str) -> tuple[Any, Any, Any]:
    """(config, store, registry) of a configuration file; a keeping period shorter than the
    minimum is refused before the store is opened."""
    from collector import registry
    from collector.store import StoreError, open_store
    from frota.commands.collector import _config

    config = _config(path)
    try:
        reg = registry.load(config.registry)
    except registry.RegistryError as err:
        raise UserError(f"fleet registry: {err}") from err
    check_retention(config, reg)
    try:
        return config, open_store(config.database.url), reg
    except StoreError as err:
        raise UserError(str(err)) from err


def check_retention(config: Any, reg: Any) -> None:
    """Refuse a keeping period shorter than the minimum of a profile in use (one line, the
    article): at the collector's start and before a prune."""
    from collector.retention import RetentionError, check_keep_days
    from collector.rules.profile import load_profiles

    try:
        check_keep_days(config.retention.keep_days, reg, load_profiles())
    except RetentionError as err:
        raise UserError(f"{err}") from None


def run_prune(args: argparse.Namespace) -> int:
    """Delete (or, dry, count) the records past the keeping period."""
    from collector import retention
    from collector.rules.profile import load_profiles
    from collector.store import StoreError
    from protocols.records import ms_to_ts

    config, store, reg = _open(args.config)
    try:
        with retention.prune_lease(store) as mine:
            if not mine:
                raise UserError("another collector is pruning this store now; try again later")
            done = retention.prune(store, reg, load_profiles(), config.retention.keep_days,
                                   now_ms=retention.now_day_ms(),
                                   batch_rows=config.retention.batch_rows, dry_run=args.dry_run)
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    verb = "would delete" if args.dry_run else "deleted"
    for one in done:
        held = f", {one.held} held" if one.held else ""
        print(f"{one.vehicle}: {verb} {one.deleted} records before {ms_to_ts(one.before_ms)} "
              f"(profile {one.profile}, {one.keep_days} days kept{held})")
    total = sum(one.deleted for one in done)
    print(f"prune: {verb} {total} records of {len(done)} vehicles", file=sys.stderr)
    return 0


def run_compact(args: argparse.Namespace) -> int:
    """Compact (or, dry, measure) the vehicle-days past compact_after_days."""
    from collector import compaction, retention
    from collector.rules.profile import load_profiles
    from collector.store import StoreError

    days = args.older_than_days
    if days is not None and days < 1:
        raise UserError("--older-than-days: at least 1 (today and yesterday are still arriving)")
    config, store, reg = _open(args.config)
    try:
        with compaction.compact_lease(store) as mine:
            if not mine:
                raise UserError("another collector is compacting this store now; try again "
                                "later")
            done = compaction.compact(
                store, reg, load_profiles(), now_ms=retention.now_day_ms(),
                after_days=days if days is not None else config.retention.compact_after_days,
                dry_run=args.dry_run)
            # days compacted before their disc summary existed get it (docs/collector.md)
            summarized, left = compaction.summarize_missing(store, load_profiles(),
                                                            dry_run=args.dry_run)
            rebuilt = 0 if args.dry_run else compaction.rebuild_minutes(store, load_profiles())
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    verb = "would compact" if args.dry_run else "compacted"
    for one in done:
        merged = " (merged with its compacted records)" if one.merged else ""
        print(f"{one.vehicle} {one.day}: {verb} {one.records} records, {one.raw_bytes} bytes of "
              f"JSON into {one.blob_bytes} ({one.blob_bytes / one.records:.2f} bytes/record)"
              f"{merged}")
    total = sum(one.records for one in done)
    print(f"compact: {verb} {total} records in {len(done)} vehicle-days", file=sys.stderr)
    if args.dry_run and left:
        print(f"compact: would summarize {left} compacted vehicle-days without a disc summary",
              file=sys.stderr)
    elif summarized:
        print(f"compact: summarized {summarized} vehicle-days compacted without a disc summary",
              file=sys.stderr)
    if rebuilt:
        print(f"compact: summarized the rows of {rebuilt} vehicles stored before the per-minute "
              "summary", file=sys.stderr)
    return 0


def run_hold_add(args: argparse.Namespace) -> int:
    """Record a hold and print it."""
    from collector import holds
    from frota.commands.collector import person_ms
    from protocols.records import now_ms

    config, store, reg = _open(args.config)
    try:
        if args.vehicle not in reg.vehicles and store.count(args.vehicle) == 0:
            raise UserError(f"vehicle {args.vehicle!r} is neither in the registry nor in the store")
        since = person_ms("--since", args.since, args.vehicle, config)
        until = person_ms("--until", args.until, args.vehicle, config)
        made = holds.add(store, args.vehicle, int(since or 0), int(until or 0), args.reason, _who(args.by), now_ms())
    except holds.HoldError as err:
        raise UserError(str(err)) from None
    finally:
        store.close()
    print(_line(made))
    return 0


def run_hold_release(args: argparse.Namespace) -> int:
    """Release a hold."""
    from collector import holds
    from protocols.records import now_ms

    _, store, _ = _open(args.config)
    try:
        done = holds.release(store, args.id, _who(args.by), now_ms())
    except holds.HoldError as err:
        raise UserError(str(err)) from None
    finally:
        store.close()
    print(_line(done))
    return 0


def run_hold_list(args: argparse.Namespace) -> int:
    """Print every hold, one a line."""
    from collector import holds

    _, store, _ = _open(args.config)
    try:
        found = holds.listed(store)
    finally:
        store.close()
    for one in found:
        print(_line(one))
    print(f"{sum(1 for h in found if h.active)} active holds, {len(found)} in all", file=sys.stderr)
    return 0


def _line(hold: Any) -> str:
    from protocols.records import ms_to_ts

    state = ("active" if hold.active else
             f"released by {hold.released_by} at {ms_to_ts(hold.released_ms)}")
    return (f"hold {hold.id}: {hold.vehicle} {ms_to_ts(hold.since_ms)} → {ms_to_ts(hold.until_ms)}"
            f" — {hold.reason} (by {hold.made_by} at {ms_to_ts(hold.made_ms)}; {state})")
