"""``frota provision``: make and change a fleet's trust material (docs/trust.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from frota.errors import UserError


def register(subparsers: Any) -> None:
    """Add ``frota provision init|collector|vehicle|revoke`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "provision",
        help="a fleet's trust material: CA, broker config, keys and credentials",
        description="Make a fleet's trust material in a folder: a fleet CA, a Mosquitto "
        "configuration (TLS, no anonymous access, logins and ACLs in the dynamic security "
        "plugin's file, which checks subscriptions too), collector and bus keys "
        "certified by the CA, broker credentials, ready configuration files. See docs/trust.md.",
    )
    sub = parser.add_subparsers(dest="provision_command", metavar="SUBCOMMAND")
    sub.required = True

    init = sub.add_parser("init", help="a new fleet: CA, broker config, first collector",
                          description="Make a new fleet in DIR: the fleet CA, "
                          "DIR/mosquitto/mosquitto.conf and DIR/collector.toml.")
    init.add_argument("dir", metavar="DIR", type=Path)
    init.add_argument("--host", action="append", metavar="NAME",
                      help="broker host name or IP in its TLS certificate; the first is the one "
                      "agents connect to (repeat; default: localhost and 127.0.0.1)")
    init.add_argument("--port", type=int, default=8883, help="the broker's TLS port (default 8883)")
    init.add_argument("--bind", default="0.0.0.0", help="the address the broker listens on")
    init.add_argument("--broker-user", default="mosquitto", metavar="USER",
                      help="the system user Mosquitto runs as, owner of its files (default "
                      "mosquitto)")
    init.add_argument("--registry", type=Path, metavar="FILE",
                      help="the fleet registry the collector reads (default: an empty "
                      "DIR/registry.json to fill in)")
    init.add_argument("--collector", default="main", metavar="NAME",
                      help="the first collector's name (default main)")
    access = init.add_mutually_exclusive_group()
    access.add_argument("--dynsec-plugin", type=Path, metavar="PATH",
                        help="Mosquitto's dynamic security plugin on the broker's machine "
                        "(default: the one installed here, e.g. /usr/lib/x86_64-linux-gnu/"
                        "mosquitto_dynamic_security.so; arm64: /usr/lib/aarch64-linux-gnu/...)")
    access.add_argument("--acl-file", action="store_true",
                        help="a password file and ACL file instead of the plugin: a bus can then "
                        "subscribe to other buses' topics (docs/deployment.md)")
    init.set_defaults(func=_init)

    col = _fleet_command(sub, "collector", _collector, help="add a collector process",
                         description="Add a collector: its signing key, broker login and ACL "
                         "lines, and DIR/collectors/NAME/collector.toml.")
    col.add_argument("name", metavar="NAME")

    veh = _fleet_command(sub, "vehicle", _vehicle, help="add a bus",
                         description="Add a bus: its agent's Ed25519 key certified by the fleet "
                         "CA, its broker login and ACL lines, and DIR/vehicles/ID/agent.toml.")
    veh.add_argument("vehicle", metavar="ID")
    veh.add_argument("--buffer", default="/var/lib/frota/buffer.sqlite", metavar="PATH",
                     help="the agent's buffer path in agent.toml (default "
                     "/var/lib/frota/buffer.sqlite)")

    rev = _fleet_command(sub, "revoke", _revoke, help="withdraw a bus",
                         description="Withdraw a bus: its broker login and ACL lines are removed "
                         "and its keys marked revoked in the keyring (kept, so its older records "
                         "still verify). Restart the broker afterwards (SIGHUP with --acl-file).")
    rev.add_argument("vehicle", metavar="ID")

    dyn = _fleet_command(sub, "dynsec", _dynsec,
                         help="move a fleet's broker to the dynamic security plugin",
                         description="Move a fleet provisioned with the password and ACL files "
                         "(--acl-file, or before the plugin) to Mosquitto's dynamic security "
                         "plugin, which also refuses a bus's subscriptions to other buses' "
                         "topics: its logins and roles go to DIR/mosquitto/dynamic-security.json "
                         "and mosquitto.conf loads the plugin. Restart the broker afterwards.")
    dyn.add_argument("--dynsec-plugin", type=Path, metavar="PATH",
                     help="the plugin's path on the broker's machine (default: the one installed "
                     "here)")

    app = _fleet_command(sub, "apply", _apply_now,
                         help="the running broker takes the fleet's changes",
                         description="Make the running broker take the fleet's logins and roles "
                         "without a restart (fleets on the dynamic security plugin): a new bus "
                         "or collector may log in, a revoked bus is disconnected and refused, "
                         "what was changed by hand is put back. Uses provisioning's own broker "
                         "login (DIR/provision/password).")
    app.add_argument("--broker", metavar="URL",
                     help="the broker as this machine reaches it (default: the fleet's URL)")


#: A subcommand's work on a provisioned fleet: (the fleet, the arguments) -> what to print.
FleetChange = Callable[[Any, argparse.Namespace], str]


def _fleet_command(sub: Any, name: str, change: FleetChange, *, help: str,
                   description: str) -> argparse.ArgumentParser:
    """Add subcommand ``name`` working on the fleet provisioned in DIR (its first argument):
    the fleet is loaded, ``change`` run (a refusal or a file error in one line, exit 1), what it
    returns printed. The parser, for the subcommand's other arguments."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    parser.add_argument("dir", metavar="DIR", type=Path)

    def run(args: argparse.Namespace) -> int:
        state = _fleet(args.dir)
        print(_run(lambda: change(state, args)))
        return 0

    parser.set_defaults(func=run)
    return parser


def _fleet(folder: Path) -> Any:
    from frota.provision.fleet import ProvisionError, load

    try:
        return load(folder)
    except ProvisionError as err:
        raise UserError(str(err)) from err


def _run(action: Any) -> Any:
    from frota.provision.broker import BrokerFileError
    from frota.provision.dynsec import DynsecError
    from frota.provision.fleet import ProvisionError
    from frota.provision.live import ApplyError
    from protocols.identity import IdentityError

    try:
        return action()
    except (ProvisionError, BrokerFileError, DynsecError, ApplyError, IdentityError) as err:
        raise UserError(str(err)) from err
    except OSError as err:
        raise UserError(f"{err.filename or 'file'}: {err.strerror}") from err


def _apply(state: Any) -> str:
    """How the running broker takes a change (docs/trust.md)."""
    if state.dynsec_plugin is None:
        return "reload the broker (SIGHUP)"
    return (f"run frota provision apply {state.folder} (or restart the broker: Mosquitto 2.0 "
            "reads the dynamic security file only when it starts; SIGHUP does not)")


def _init(args: argparse.Namespace) -> int:
    from frota.provision import fleet

    made = _run(lambda: fleet.init(
        args.dir, hosts=args.host or ["localhost", "127.0.0.1"], port=args.port, bind=args.bind,
        broker_user=args.broker_user, registry=args.registry, collector=args.collector,
        dynsec_plugin=args.dynsec_plugin, acl_file=args.acl_file,
    ))
    print(f"fleet provisioned in {made.folder}")
    if made.dynsec_plugin is None and not args.acl_file:
        print("warning: Mosquitto's dynamic security plugin was not found (give --dynsec-plugin "
              "PATH): the broker uses a password file and ACL file, which cannot refuse a bus's "
              "subscriptions (docs/deployment.md)", file=sys.stderr)
    print(f"  broker:    mosquitto -c {made.mosquitto / 'mosquitto.conf'}  ({made.broker_url})")
    print(f"  collector: frota collector run --config {made.folder / 'collector.toml'}")
    print(f"  registry:  {made.registry}")
    print(f"  keep {made.ca_key_path} offline once the fleet is provisioned")
    return 0


def _collector(state: Any, args: argparse.Namespace) -> str:
    from frota.provision import fleet

    path = fleet.add_collector(state, args.name)
    return (f"collector {args.name!r}: frota collector run --config {path}\n"
            f"{_apply(state)} to let it log in")


def _vehicle(state: Any, args: argparse.Namespace) -> str:
    from frota.provision import fleet

    path = fleet.add_vehicle(state, args.vehicle, args.buffer)
    return (f"vehicle {args.vehicle}: copy {path.parent} to the bus as /etc/frota "
            f"(frota agent run --config /etc/frota/agent.toml)\n"
            f"{_apply(state)} to let it log in")


def _revoke(state: Any, args: argparse.Namespace) -> str:
    from frota.provision import fleet

    count = fleet.revoke(state, args.vehicle)
    return (f"vehicle {args.vehicle} revoked ({count} key(s) kept in the keyring as revoked); "
            f"{_apply(state)}")


def _dynsec(state: Any, args: argparse.Namespace) -> str:
    from frota.provision import fleet

    plugin = fleet.use_dynsec(state, args.dynsec_plugin)
    return (f"the broker's logins and roles are in {state.dynsec_path} (plugin {plugin}); "
            f"{_apply(state)}")


def _apply_now(state: Any, args: argparse.Namespace) -> str:
    from frota.provision import live
    from protocols.uplink import mask_url

    done = live.apply(state, args.broker)
    return (f"the broker at {mask_url(args.broker or state.broker_url)} runs the fleet's logins: "
            f"{len(done.created)} added ({', '.join(done.created) or 'none'}), "
            f"{len(done.deleted)} removed ({', '.join(done.deleted) or 'none'}), "
            f"{len(done.restored)} put back as provisioned "
            f"({', '.join(done.restored) or 'none'})")
