"""``frota sim <device> ...``: device simulators on pseudo-terminals (one module per device).

Each simulator module exposes ``register_sim(subparsers)``, which adds its ``frota sim <device>``
parser and sets ``func``. A device's simulator is named by its entry in ``protocols.registry``;
simulators of more than one device (whole-trip scenarios) are listed in :data:`PLAYER_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from protocols import registry

#: Simulators that play several devices at once, listed after the devices' own.
PLAYER_MODULES: tuple[str, ...] = ("simulators.scenario.command", "simulators.fleet_cli")


def sim_modules() -> list[str]:
    """The simulator modules, in the order ``frota sim --help`` lists them (one per line)."""
    return [*registry.simulator_modules(), *PLAYER_MODULES]


def register(subparsers: Any) -> None:
    """Add ``frota sim`` and every simulator's subcommand to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sim",
        help="run simulated devices on pseudo-terminals",
        description="Run a simulated device (or a whole trip) on pseudo-terminals. Each "
        "simulator prints the tty path to open on stdout, then runs until interrupted "
        "(or until --duration device seconds have passed).",
    )
    devices = parser.add_subparsers(dest="device", metavar="DEVICE")
    devices.required = True
    for name in sim_modules():
        importlib.import_module(name).register_sim(devices)
