"""``frota sim <device> ...``: device simulators on pseudo-terminals (one module per device).

Each module in :data:`SIM_MODULES` exposes ``register_sim(subparsers)``, which adds its
``frota sim <device>`` parser and sets ``func``. To add a simulator, add its module name here.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

#: The simulator modules, in the order ``frota sim --help`` lists them (one per line).
SIM_MODULES: tuple[str, ...] = (
    "simulators.registrador",
    "simulators.gps",
    "simulators.apc",
    "simulators.scenario.command",
)


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
    for name in SIM_MODULES:
        importlib.import_module(name).register_sim(devices)
