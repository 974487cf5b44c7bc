"""``frota demo``: the main job on embedded defaults, end to end, with live counts and the findings.

A private Mosquitto on a free loopback port, ``frota collector run`` storing into SQLite, a
scenario played on the registrador, GPS and door counters (three pseudo-terminals, in a thread
of this process: :func:`simulators.scenario.play.play`), and ``frota agent run`` reading those
ttys. Everything it writes (configurations, databases, logs) is in the work directory. One run
is :class:`frota.demo.session.Demo` (imported when the command runs: ``frota`` itself starts
without the collector's and the harness's modules).

The end of a trip is handled so that nothing is lost and nothing spurious is recorded: after the
scenario's last second the player holds the lines open while the demo waits for the agent's
buffer to stop growing and its backlog to reach zero, then stops the agent, and only then closes
the lines (an agent still reading would report its devices ``disconnected``).
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path
from typing import Any

from frota.errors import UserError

TARGET_PLAY_S = 60.0
#: A file in the work directory saying the demo made it (so it may be cleaned).
MARKER = ".frota-demo"


def register(subparsers: Any) -> None:
    """Add ``frota demo``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="the main job end to end: simulated bus → agent → MQTT → collector → findings",
        description="Start a private Mosquitto, the collector (SQLite) and the agent as real "
        "processes, play a whole-trip scenario on the simulated registrador, GPS and door "
        "counters (pseudo-terminals), show live counts, then the trip's summary and findings "
        "and where to look. Everything goes into the work directory.",
    )
    parser.add_argument("--scenario", default="sp-clean", metavar="NAME|PATH",
                        help="a shipped scenario (see 'frota sim scenario list') or a scenario "
                        "file (default sp-clean)")
    parser.add_argument("--time-scale", type=float, metavar="X",
                        help="scenario seconds per real second (default: the whole scenario "
                        f"in about {TARGET_PLAY_S:.0f} s)")
    parser.add_argument("--tachograph", choices=("registrador", "fms"), default="registrador",
                        help="read the tachograph on its serial line (registrador, the default) "
                        "or on the bus's FMS CAN interface through a simulated SLCAN adapter "
                        "(fms); with fms the trips come from the operator, entered in the "
                        "collector as the scenario reaches them (frota collector enter trip)")
    parser.add_argument("--workdir", default="var/demo", metavar="DIR",
                        help="where the configurations, databases and logs go (default "
                        "./var/demo); emptied at the start unless --keep")
    parser.add_argument("--keep", action="store_true",
                        help="keep what the work directory holds: the agent's buffer and the "
                        "collector's database grow across runs (the same scenario played again "
                        "is the same registrador frames, stored once, but new GPS fixes and "
                        "door counts)")
    parser.set_defaults(func=run)


def _scenario(name: str) -> tuple[Any, Any]:
    """The scenario and its timeline, or a UserError naming the option."""
    from simulators.errors import SimulatorError
    from simulators.scenario.command import load_scenario

    try:
        return load_scenario(name)
    except SimulatorError as err:
        raise UserError(f"--scenario {err}") from err


def _prepare(workdir: Path, keep: bool) -> None:
    """Create the work directory; empty it (only if the demo made it) unless ``keep``."""
    if workdir.exists() and not workdir.is_dir():
        raise UserError(f"--workdir {workdir} is not a directory")
    if workdir.exists() and not keep and any(workdir.iterdir()):
        if not (workdir / MARKER).exists():
            raise UserError(f"--workdir {workdir} holds files the demo did not make; "
                            "give an empty or new directory")
        for entry in workdir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    (workdir / "ttys").mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("made by frota demo; emptied by its next run\n")


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when every record arrived, 130 when interrupted."""
    from frota import harness
    from frota.demo.session import Demo
    from frota.harness import HarnessError

    if harness.mosquitto_binary() is None:
        raise UserError("mosquitto not found: install it (Debian: apt-get install mosquitto) "
                        "or run 'bash scripts/demo.sh', which does")
    sc, tl = _scenario(args.scenario)
    if args.time_scale is not None and args.time_scale <= 0:
        raise UserError(f"--time-scale must be > 0, not {args.time_scale}")
    scale = args.time_scale or max(1.0, tl.duration_s / TARGET_PLAY_S)
    workdir = Path(args.workdir).resolve()
    _prepare(workdir, args.keep)
    # The player's lines are announced by the demo itself: its INFO logs would break the display.
    player_log = logging.getLogger("simulators")
    player_log.setLevel(max(logging.WARNING, logging.getLogger().getEffectiveLevel()))
    try:
        return Demo(sc, tl, scale, workdir, args.tachograph).run()
    except HarnessError as err:  # a process died or never became ready: the one-line message
        raise UserError(str(err)) from err
