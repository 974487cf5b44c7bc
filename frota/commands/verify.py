"""``frota verify``: are a store's records complete and unaltered? (``docs/trust.md``)"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from frota.errors import UserError
from protocols.records import RecordError, ms_to_ts, ts_to_ms

#: Exit status when anything is missing, altered or unverifiable.
NOT_INTACT = 3


def register(subparsers: Any) -> None:
    """Add ``frota verify`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "verify",
        help="check a store's signatures, chains and completeness",
        description="Check a bundle (frota verify BUNDLE [--ca FILE] [--lang pt-BR]) or a "
        "collector's store: every checkpoint's signature against the keys "
        "the fleet CA certified, every agent's hash chain, each stored record against the one "
        "received, gaps in seq and in registrador frame numbers. Prints a summary and each "
        "problem with where it is; exits 0 when intact, 3 otherwise. See docs/trust.md.",
    )
    parser.add_argument("bundle", nargs="?", metavar="BUNDLE",
                        help="a bundle (ZIP) from the collector or from frota agent export: "
                        "check it alone (docs/roadside.md)")
    parser.add_argument("--lang", default="en", metavar="LANG",
                        help="the bundle summary's language: en (default) or pt-BR")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--db", metavar="PATH", help="a SQLite database file (or a postgresql:// DSN)")
    source.add_argument("--config", metavar="FILE",
                        help="the collector's configuration: its database, CA and keyring")
    parser.add_argument("--vehicle", metavar="ID", help="only this vehicle")
    parser.add_argument("--since", metavar="TS", help="report problems at or after this time")
    parser.add_argument("--until", metavar="TS", help="report problems before this time")
    parser.add_argument("--ca", metavar="FILE", type=Path,
                        help="the fleet CA certificate (default: the configuration's trust.ca_file)")
    parser.add_argument("--keyring", metavar="FILE", type=Path,
                        help="the fleet keyring (default: the configuration's trust.keyring, "
                        "else keyring.json beside the CA); for a BUNDLE, its signer's key must "
                        "be in it and not revoked before the bundle was made")
    parser.set_defaults(func=run)


def _ms(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return ts_to_ms(value)
    except RecordError:
        raise UserError(f"{option} {value!r} is not an RFC 3339 timestamp") from None


def run(args: argparse.Namespace) -> int:
    """Verify the bundle or the store and print the summary; 0 intact, 3 otherwise."""
    if args.bundle is not None:
        if args.db is not None or args.config is not None:
            raise UserError("give a BUNDLE or --db/--config, not both")
        from frota.commands.verify_bundle import run_bundle

        return run_bundle(args.bundle, args.ca, args.lang, args.keyring)
    if args.db is None and args.config is None:
        raise UserError("give a BUNDLE to check, or --db PATH or --config FILE for a store")
    from collector.chaincheck import check_store
    from collector.store import StoreError, open_store
    from protocols.identity import IdentityError, load_cert_file
    from protocols.keyring import load_keyring

    since, until = _ms("--since", args.since), _ms("--until", args.until)
    url, ca, keyring_path = args.db, args.ca, args.keyring
    if args.config is not None:
        from collector.config import ConfigError, load_config

        try:
            config = load_config(Path(args.config))
        except ConfigError as err:
            raise UserError(str(err)) from err
        url = config.database.url
        if config.trust is not None:
            ca = ca or config.trust.ca_file
            keyring_path = keyring_path or config.trust.keyring
    keyring = None
    if ca is not None:
        try:
            keyring = load_keyring(keyring_path or ca.parent / "keyring.json", load_cert_file(ca))
        except IdentityError as err:
            raise UserError(str(err)) from err
    try:
        store = open_store(url, create=False)
    except StoreError as err:
        raise UserError(str(err)) from err
    try:
        report = check_store(store, keyring, args.vehicle)
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    # --since/--until limit the problems shown, never what is checked (docs/trust.md)
    shown = [p for p in report.problems if p.within(since, until)]
    outside = len(report.problems) - len(shown)
    print(f"store {url}: {report.vehicles} vehicle(s), {report.agents} agent(s), "
          f"{report.records} record(s), {report.hash_only} hash-only entr(ies), "
          f"{report.checkpoints_good} signed checkpoint(s) verified, "
          f"{report.operator_entries} operator entr(ies) (signed by the collector)")
    if keyring is None:
        print("no fleet CA given (--ca or the configuration's trust): signatures not checked")
    for problem in keyring.problems if keyring is not None else []:
        print(f"keyring: {problem}")
    if since is not None or until is not None:
        period = (f"from {ms_to_ts(since) if since is not None else 'the start'} "
                  f"until {ms_to_ts(until) if until is not None else 'the end'}")
        print(f"problems shown: {period} (every chain checked whole; "
              f"{outside} problem(s) outside it not shown)")
    if not shown:
        print("intact: every record verifies" if not outside
              else "intact in that period: every record in it verifies")
        return 0
    print(f"NOT INTACT: {len(shown)} problem(s)")
    for p in sorted(shown, key=lambda p: (p.vehicle, p.agent, p.seq or 0)):
        when = _when(p)
        where = f"seq {p.seq}" if p.agent != "registrador" else "frame"
        print(f"  {p.vehicle} agent {p.agent} {where}: {p.cause}: {p.detail}{when}")
    return NOT_INTACT


def _when(p: Any) -> str:
    """The problem's time: a record's, or the span of a stretch (its known ends)."""
    if not p.stretch:
        return f" ({ms_to_ts(p.ts_ms)})" if p.ts_ms is not None else ""
    if p.ts_ms is None and p.end_ms is None:
        return ""
    lo = ms_to_ts(p.ts_ms) if p.ts_ms is not None else "?"
    hi = ms_to_ts(p.end_ms) if p.end_ms is not None else "?"
    return f" (between {lo} and {hi})"
