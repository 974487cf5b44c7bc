"""``frota collector inspector-token``: a signed, expiring token an inspector shows to a bus's
roadside page, which the agent checks offline (``protocols/inspector_token.py``,
``docs/roadside.md``)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from frota.errors import UserError

log = logging.getLogger(__name__)


def add_subcommands(sub: Any) -> None:
    """Add ``inspector-token`` to ``frota collector``."""
    parser = sub.add_parser(
        "inspector-token", help="issue an inspector's token for the buses' roadside pages",
        description="Print a token signed by this collector's certified key (its [trust]) that "
        "lets INSPECTOR read the roadside page of the named buses (or of every bus with "
        "--vehicle '*') for HOURS (at most 24). The bus checks it offline against the fleet CA. "
        "Each token issued is logged. See docs/roadside.md.")
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="the collector's TOML configuration (with [trust])")
    parser.add_argument("--inspector", required=True, metavar="NAME",
                        help="who: the inspector's name or registration")
    parser.add_argument("--vehicle", action="append", required=True, metavar="ID",
                        help="a vehicle the token opens (repeat; '*' for the whole fleet)")
    parser.add_argument("--hours", type=float, default=12.0, metavar="H",
                        help="how long it is valid from now (default 12, at most 24)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Issue and print the token."""
    import re

    from collector.signer import AckSigner
    from frota.commands.collector import _config
    from protocols import identity
    from protocols.inspector_token import issue, token_id
    from protocols.records import VEHICLE_ID_PATTERN, now_ms

    config = _config(args.config)
    if config.trust is None:
        raise UserError(f"{args.config}: no [trust]: this collector has no key to sign tokens")
    for vehicle in args.vehicle:
        if vehicle != "*" and not re.fullmatch(VEHICLE_ID_PATTERN, vehicle):
            raise UserError(f"--vehicle {vehicle!r} is not a vehicle id")
    try:
        signer = AckSigner(config.trust.key_file, config.trust.cert_file, config.trust.ca_file)
        cert = identity.load_cert_file(config.trust.cert_file)
        token = issue(signer.key, cert, args.inspector, args.vehicle, now_ms(), args.hours)
    except (identity.IdentityError, OSError) as err:
        raise UserError(str(err)) from err
    except ValueError as err:
        raise UserError(str(err)) from None
    _warn_unknown(config.registry, args.vehicle)
    log.info("inspector token %s issued to %r for %s, %s h", token_id(token), args.inspector,
             ",".join(args.vehicle), args.hours)
    print(token)
    return 0


def _warn_unknown(registry_file: Any, vehicles: list[str]) -> None:
    """Warn of a vehicle the registry does not list (a typo gives a token no bus accepts); not
    refused: a bus may be provisioned before the registry lists it."""
    from collector import registry as fleet

    try:
        known = fleet.load(registry_file).vehicles
    except (OSError, fleet.RegistryError) as err:
        log.warning("cannot read the registry to check the vehicles: %s", err)
        return
    for vehicle in vehicles:
        if vehicle != "*" and vehicle not in known:
            log.warning("vehicle %s is not in the registry %s: check its id (the token opens "
                        "only a bus of that exact id)", vehicle, registry_file)
