"""``frota collector export``: the collector's signed bundle of a vehicle's period, or the
accident-data export of a ``trip.accident_data`` finding (``--finding ID``), written to a file —
the bundle the pages and the API give (``collector/web/export.py``, ``collector/web/accident.py``),
signed with the collector's ``[trust]`` key; every export logged."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from frota.errors import UserError

log = logging.getLogger("frota.collector.export")


def add_subcommands(sub: Any) -> None:
    """Add ``export`` under ``frota collector``."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "export",
        help="write a signed bundle: a vehicle's period, or the accident-data export of a finding",
        description="Write the collector's signed bundle (records, findings, day charts, a "
        "manifest signed with the [trust] key, the certificates) of a vehicle's period, or of "
        "the vehicle and period a trip.accident_data finding names (--finding: after an "
        "accident with victims, TO 58 § único, SP 43 II, BA 34 § único). 'frota verify BUNDLE' "
        "checks it. Every export is logged. See docs/pages.md.")
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="the collector's TOML configuration (database, registry, [trust])")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--finding", metavar="ID", help="a trip.accident_data finding's id")
    what.add_argument("--vehicle", metavar="ID", help="a vehicle (with --since and --until)")
    parser.add_argument("--since", metavar="TS", help="RFC 3339, or a date (local), inclusive")
    parser.add_argument("--until", metavar="TS", help="RFC 3339, or a date (local), exclusive")
    parser.add_argument("--by", metavar="NAME", default=None,
                        help="who takes the export, for the log (default: the OS user)")
    parser.add_argument("--out", required=True, metavar="PATH",
                        help="the bundle's file, or a folder to write frota-….zip in")
    parser.set_defaults(func=run_export)


def _web(config: Any) -> Any:
    """The pages' view of the collector's store, registry and key (as ``frota collector run``)."""
    from collector import registry as fleet
    from collector.ingest import Ingest
    from collector.rules.profile import load_profiles
    from collector.store import StoreError, open_store
    from collector.web.context import RegistryFile, Web
    from collector.web.export import BundleSigner
    from protocols.identity import IdentityError

    signer = None
    if config.trust is not None:
        from collector.signer import AckSigner

        trust = config.trust
        try:
            ack = AckSigner(trust.key_file, trust.cert_file, trust.ca_file)
            signer = BundleSigner(ack.name, ack.key_id, ack.cert_pem, trust.ca_file.read_text(),
                                  ack.key.sign)
        except (IdentityError, OSError) as err:
            raise UserError(f"trust: the collector's key: {err}") from err
    try:
        registry = RegistryFile(config.registry)
    except (OSError, fleet.RegistryError) as err:
        raise UserError(f"fleet registry: {err}") from err
    try:
        store = open_store(config.database.url, create=False)
    except StoreError as err:
        raise UserError(str(err)) from err
    vehicles = frozenset(registry().vehicles)
    return Web(store, registry, load_profiles(), Ingest(store, lambda: vehicles), None,
               signer=signer)


def _target(out: str, name: str) -> Path:
    """The file ``--out`` names, or ``name`` in the folder it names (``-2``… when taken; a
    trailing ``/`` must be a folder that exists), as ``frota agent export``."""
    from agent.export import ExportError, check_out, out_target

    try:
        check_out(out)
    except ExportError as err:
        raise UserError(str(err)) from None
    return out_target(out, name.removesuffix(".zip"))


def run_export(args: argparse.Namespace) -> int:
    """Write the bundle; print what was written."""
    from collector.entries import EntryError, check_by, os_user
    from collector.store import StoreError
    from collector.tokens import Token
    from collector.web import accident, export
    from collector.web.context import NotFoundError
    from frota.commands.collector import _config
    from protocols.records import ms_to_ts, now_ms

    if args.finding is not None and (args.since or args.until):
        raise UserError("--since/--until go with --vehicle; a finding names its own period")
    if args.vehicle is not None and not (args.since and args.until):
        raise UserError("--vehicle needs --since and --until")
    by = args.by if args.by is not None else os_user()
    try:
        check_by(by)
    except EntryError as err:
        raise UserError(f"--by: {err}") from None
    web = _web(_config(args.config))
    now = now_ms()
    user = Token(f"cli {by}", "admin", None, ms_to_ts(now), "")
    try:
        if args.finding is not None:
            wanted = accident.accident_export(web, user, args.finding)
            name, vehicle = wanted.filename, wanted.vehicle
            lo, hi = wanted.since_ms, wanted.until_ms
        else:
            vehicle = args.vehicle
            web.check_vehicle(user, vehicle)
            lo = export.parse_bound("--since", args.since, web, vehicle)
            hi = export.parse_bound("--until", args.until, web, vehicle)
            export.check_period(lo, hi)
            name = f"frota-{vehicle}-{ms_to_ts(lo)[:10]}.zip"
        target = _target(args.out, name)
        if args.finding is not None:
            data = accident.accident_bundle(web, user, wanted, now, str(target))
        else:
            data = export.bundle(web, user, vehicle, lo, hi, web.signer, now)
            log.info("export: %s took the bundle of %s from %s to %s to %s", user.id, vehicle,
                     ms_to_ts(lo), ms_to_ts(hi), target)
        _write(target, data)
    except (NotFoundError, export.ExportError, StoreError) as err:
        raise UserError(str(err)) from None
    finally:
        web.store.close()
    if web.signer is None:
        print("warning: the collector has no [trust]: the bundle is NOT signed", file=sys.stderr)
    print(f"wrote {target}: {vehicle} from {ms_to_ts(lo)} to {ms_to_ts(hi)}, taken by {by}; "
          f"check it with: frota verify {target} --ca CA_FILE")
    return 0


def _write(target: Path, data: bytes) -> None:
    """Through ``PATH.partial``, synced, renamed (as ``frota agent export``): no half bundle
    under the final name."""
    from agent.export import ExportError
    from agent.export import _write as write_synced

    try:
        write_synced(target, data)
    except ExportError as err:
        raise UserError(str(err)) from None
