"""``frota sim scenario list|render|play``: whole-trip scenarios (docs/scenarios.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from protocols.records import dumps, validate
from simulators.errors import SimulatorError
from simulators.noise import NoiseConfig
from simulators.scenario import find, load, shipped
from simulators.scenario.model import Scenario, ScenarioError
from simulators.scenario.play import TACHOGRAPHS, device_names, play
from simulators.scenario.render import iter_records
from simulators.scenario.timeline import Timeline, build


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim scenario`` and its subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "scenario",
        help="whole-trip scenarios: list, render to records, play on all devices",
        description="Whole-trip scenarios (TOML, see docs/scenarios.md): a line, its stops, "
        "the speed profile, drivers, doors and incidents. FILE is a path or the name of a "
        "shipped scenario (see 'frota sim scenario list').",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    lister = actions.add_parser("list", help="list the shipped scenarios",
                                description="List the shipped scenarios: name, hours, km, "
                                "registry file and description.")
    lister.set_defaults(func=run_list)

    render = actions.add_parser(
        "render", help="render a scenario to canonical records (JSON Lines)",
        description="Render a scenario straight to canonical records (JSON Lines, one per "
        "line, in time order) without devices: speed and position at 1 Hz, driver, trip, "
        "incident, door and device records at their times.",
    )
    render.add_argument("file", metavar="FILE", help="scenario file or shipped name")
    render.add_argument("-o", "--output", metavar="OUT", help="write to OUT (default stdout)")
    render.set_defaults(func=run_render)

    player = actions.add_parser(
        "play", help="play a scenario on the registrador (or FMS), GPS and door counters (ptys)",
        description="Play a scenario on three pseudo-terminals: the registrador, the GPS "
        "(NMEA) and the door counters (APC-485, answering polls). Prints 'NAME PATH' for "
        "each device, waits --lead-in seconds, then plays; the device clocks follow the "
        "scenario's time. With --tachograph fms the tachograph is on the bus's FMS CAN "
        "interface instead, an SLCAN adapter on the 'fms' pty (firmware-notes/fms.md); the "
        "trips and incidents its console would have sent are printed as 'operator RECORD' "
        "lines at their time, for the operator to enter (frota collector enter trip).",
    )
    player.add_argument("file", metavar="FILE", help="scenario file or shipped name")
    player.add_argument("--time-scale", type=float, default=1000.0, metavar="X",
                        help="scenario seconds per real second (default 1000)")
    player.add_argument("--links", metavar="DIR",
                        help="also make the ttys reachable as DIR/registrador (or DIR/fms), "
                        "DIR/gps, DIR/apc")
    player.add_argument("--tachograph", choices=TACHOGRAPHS, default="registrador",
                        help="where the tachograph is read: its serial line (registrador, the "
                        "default) or the FMS CAN bus (fms)")
    player.add_argument("--lead-in", type=float, default=1.0, metavar="SECONDS",
                        help="real seconds between printing the paths and playing (default 1)")
    player.add_argument("--tail", type=float, default=1.0, metavar="SECONDS",
                        help="real seconds to keep the lines open after the end (default 1)")
    noise = player.add_argument_group("line noise (on every line)")
    noise.add_argument("--ber", type=float, default=0.0, help="bit-error rate (default 0)")
    noise.add_argument("--garbage", type=float, default=0.0,
                       help="garbage bytes as a fraction of the bytes sent (default 0)")
    noise.add_argument("--seed", type=int, help="random seed of the noise")
    player.set_defaults(func=run_play)


def load_scenario(name: str) -> tuple[Scenario, Timeline]:
    """A scenario and its timeline, or a SimulatorError naming the file and the mistake."""
    path = find(name)
    if not path.exists():
        raise SimulatorError(f"{name}: no such file, and no shipped scenario of that name "
                        "(see 'frota sim scenario list')")
    try:
        sc = load(path)
    except ScenarioError as err:
        raise SimulatorError(str(err)) from err
    try:
        return sc, build(sc)
    except ScenarioError as err:
        raise SimulatorError(f"{path.name}: {err}") from err


def run_list(args: argparse.Namespace) -> int:
    """Print the shipped scenarios."""
    for path in shipped():
        sc, tl = load_scenario(str(path))
        print(f"{sc.name:<14} {tl.duration_s / 3600:5.1f} h {tl.route.length_m / 1000:6.1f} km  "
              f"{sc.registry_path.name:<28} {sc.description}")
    return 0


def run_render(args: argparse.Namespace) -> int:
    """Write a scenario's records as JSON Lines."""
    _, tl = load_scenario(args.file)
    try:
        stream = (Path(args.output).open("w", encoding="utf-8")  # noqa: SIM115
                  if args.output else sys.stdout)
    except OSError as err:
        raise SimulatorError(f"cannot write {args.output}: {err.strerror}") from err
    try:
        for rec in iter_records(tl):
            stream.write(dumps(validate(rec)) + "\n")
    finally:
        if stream is not sys.stdout:
            stream.close()
    return 0


def run_play(args: argparse.Namespace) -> int:
    """Play a scenario on three ptys."""
    sc, _ = load_scenario(args.file)
    if args.time_scale <= 0:
        raise SimulatorError(f"--time-scale must be > 0, not {args.time_scale}")
    links = Path(args.links) if args.links else None
    if links is not None:
        if not links.is_dir():
            raise SimulatorError(f"--links {links} is not a directory")
        for name in device_names(args.tachograph):
            if (links / name).exists() and not (links / name).is_symlink():
                raise SimulatorError(f"--links: {links / name} exists and is not a symlink")
    try:
        noise = NoiseConfig(ber=args.ber, garbage=args.garbage, seed=args.seed)
        play(sc, time_scale=args.time_scale, links=links, noise=noise,
             lead_in_s=args.lead_in, tail_s=args.tail, tachograph=args.tachograph,
             on_operator=lambda rec: print(f"operator {dumps(rec)}", flush=True))
    except ValueError as err:
        raise SimulatorError(str(err)) from err
    except OSError as err:
        raise SimulatorError(f"cannot open a pseudo-terminal: {err}") from err
    return 0
