"""The ``frota`` command: one entry point, one module per subcommand under ``frota.commands``.

Every subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (taking the parsed namespace, returning the exit status). User errors are raised as
:class:`frota.errors.UserError` and printed as one line; no traceback reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from frota import __version__
from frota.commands import agent, check, collector, decode, demo, provision, sim, verify
from frota.errors import UserError
from simulators.errors import SimulatorError

#: The subcommands, in the order ``frota --help`` lists them.
COMMAND_MODULES: tuple[ModuleType, ...] = (
    demo, decode, sim, agent, collector, check, provision, verify,
)
#: Each subcommand's module by the command's name (each module is named after its command).
COMMANDS: dict[str, ModuleType] = {m.__name__.rsplit(".", 1)[1]: m for m in COMMAND_MODULES}


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the README's exit codes: a bad argument is a user error, status 1 with one
    line (argparse prints its usage and exits 2). Subcommand parsers inherit the class."""

    #: True for ``frota`` itself; a subcommand's parser reports its own unknown arguments.
    top = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """As argparse, but a subcommand names itself when it is given an unknown argument
        (argparse leaves it to ``frota``: 'frota: error: unrecognized arguments')."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not self.top:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` on one line and exit 1."""
        self.exit(1, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full argument parser with every registered subcommand; given ``command`` (a key of
    :data:`COMMANDS`), with that one alone: all that parsing a command line naming it needs
    (building ``sim``'s and ``decode``'s parsers imports every device plugin, which a process
    such as ``frota agent run`` or ``frota check`` would pay at each start)."""
    parser = ArgumentParser(
        prog="frota",
        description="Frota: telemetry for intercity buses (registrador, GPS, door counters) "
        "from the bus to the law.",
    )
    parser.top = True
    parser.add_argument("--version", action="version", version=f"frota {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold for messages on stderr (default INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module in COMMAND_MODULES if command is None else (COMMANDS[command],):
        module.register(subparsers)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand a command line names before any other option than ``--log-level``; None
    (the full parser) for ``--help``, ``--version``, a misspelt command or none."""
    at = 0
    while at < len(argv):
        word = argv[at]
        if word == "--log-level":
            at += 2
        elif word.startswith("--log-level="):
            at += 1
        else:
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 user error)."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_named(words))
    try:
        args = parser.parse_args(words)
    except SystemExit as done:  # --help, --version (0) and argument errors (1): no traceback
        return done.code if isinstance(done.code, int) else 1
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        status: int = args.func(args)
    except (UserError, SimulatorError) as err:
        print(f"frota {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
