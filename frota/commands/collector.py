"""``frota collector``: ``run`` the collector (MQTT ingest, store, HTTP); ``records`` prints stored records."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from frota.errors import UserError


def register(subparsers: Any) -> None:
    """Add ``frota collector run`` and ``frota collector records`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "collector",
        help="the collector: MQTT ingest, storage, HTTP API; read stored records",
        description="The operator's collector: receives the agents' batches over MQTT, stores "
        "each record once, acknowledges what it stored and serves /health. See docs/collector.md.",
    )
    sub = parser.add_subparsers(dest="collector_command", metavar="SUBCOMMAND")
    sub.required = True

    run_parser = sub.add_parser(
        "run",
        help="run the collector until interrupted",
        description="Run the collector (MQTT ingest + HTTP API) with a TOML configuration file.",
    )
    run_parser.add_argument(
        "--config", required=True, metavar="FILE", help="the collector's TOML configuration"
    )
    run_parser.set_defaults(func=run)

    records_parser = sub.add_parser(
        "records",
        help="print a vehicle's stored records as JSON Lines",
        description="Print the records stored for a vehicle with SINCE <= ts < UNTIL as JSON "
        "Lines, as received, in (ts, seq) order.",
    )
    source = records_parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="read the database named in this file")
    source.add_argument(
        "--db", metavar="PATH", help="a SQLite database file (or a postgresql:// DSN)"
    )
    records_parser.add_argument("--vehicle", required=True, metavar="ID", help="the vehicle id")
    records_parser.add_argument(
        "--since", required=True, metavar="TS",
        help="RFC 3339 time, or a date (a day in the vehicle's local time), inclusive"
    )
    records_parser.add_argument("--until", metavar="TS",
                                help="RFC 3339 time, or a date (local), exclusive")
    records_parser.set_defaults(func=records)

    from frota.commands.collector_findings import add_subcommands

    add_subcommands(sub)  # enter incident|report, findings

    from frota.commands import collector_tokens

    collector_tokens.add_subcommands(sub)  # token add|list|remove

    from frota.commands import collector_retention

    collector_retention.add_subcommands(sub)  # prune, compact, hold add|release|list

    from frota.commands import collector_rejects

    collector_rejects.add_subcommands(sub)  # rejects replay

    from frota.commands import collector_inspector

    collector_inspector.add_subcommands(sub)  # inspector-token

    from frota.commands import collector_export

    collector_export.add_subcommands(sub)  # export


def _config(path: str) -> Any:
    from collector.config import ConfigError, load_config

    try:
        return load_config(Path(path))
    except ConfigError as err:
        raise UserError(str(err)) from err


def run(args: argparse.Namespace) -> int:
    """Run the collector with the configuration file."""
    from collector import registry, service
    from collector.store import StoreError
    from frota.commands.collector_retention import check_retention
    from protocols.identity import IdentityError
    from protocols.mqtt_client import MqttError

    config = _config(args.config)
    if config.log_level is not None:
        logging.getLogger().setLevel(config.log_level)
    try:
        # a keeping period shorter than the law's minimum: refused before anything starts
        check_retention(config, registry.load(config.registry))
        return service.run(config)
    except registry.RegistryError as err:
        raise UserError(f"fleet registry: {err}") from err
    except (StoreError, MqttError, IdentityError, service.StartError) as err:
        raise UserError(str(err)) from err


def person_ms(option: str, value: str | None, vehicle: str | None, config: Any) -> int | None:
    """A time typed by a person: RFC 3339, or a date — a day in the vehicle's home profile's
    zone (registry ``vehicles[].profile``, with ``--config``), else the default profile's."""
    if value is None:
        return None
    from collector import registry
    from collector.localtime import LocalTimeError, home_profile, person_time_ms
    from collector.rules.profile import load_profiles

    reg = None
    if config is not None:
        try:
            reg = registry.load(config.registry)
        except registry.RegistryError:
            reg = None          # the zone then comes from the default profile
    tz = home_profile(vehicle, reg, load_profiles()).tz
    try:
        return person_time_ms(value, tz)
    except LocalTimeError as err:
        raise UserError(f"{option} {err}") from None


def records(args: argparse.Namespace) -> int:
    """Print the stored records of a vehicle between two times as JSON Lines."""
    from collector.store import StoreError, open_store

    config = _config(args.config) if args.config is not None else None
    since = person_ms("--since", args.since, args.vehicle, config)
    until = person_ms("--until", args.until, args.vehicle, config)
    url = args.db if config is None else config.database.url
    try:
        store = open_store(url, create=False)
    except StoreError as err:
        raise UserError(str(err)) from err
    out = sys.stdout
    written = 0
    try:
        for text in store.records(args.vehicle, since, until):
            out.write(text + "\n")
            written += 1
        out.flush()
        if written == 0:
            _say_why_none(store, args)
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    return 0


def _say_why_none(store: Any, args: argparse.Namespace) -> None:
    """No record printed: an unknown vehicle is a user error; an empty range is said on stderr."""
    if store.count(args.vehicle) == 0:
        known = store.vehicle_ids()
        listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        raise UserError(
            f"no records stored for vehicle {args.vehicle!r} "
            + (f"(vehicles with records: {listed})" if known else "(the store holds no records)")
        )
    span = f"since {args.since}" + (f" until {args.until}" if args.until else "")
    print(f"frota collector records: no records for {args.vehicle} {span}", file=sys.stderr)
