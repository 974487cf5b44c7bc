"""Options every ``frota sim <device>`` shares (line, clock, noise) and the serve loop they feed."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

from protocols.records import RecordError, ts_to_ms
from simulators.clock import ScaledClock
from simulators.errors import SimulatorError
from simulators.noise import Noise, NoiseConfig
from simulators.pty import PtyPort
from simulators.runner import DeviceModel, Runner, SentLog, Station

log = logging.getLogger(__name__)


def add_line_arguments(parser: argparse.ArgumentParser, *, baud: int = 115_200) -> None:
    """Add --link, --baud, the clock options and the noise options to a simulator's parser."""
    line = parser.add_argument_group("serial line")
    line.add_argument(
        "--link", metavar="PATH",
        help="also make the tty reachable at PATH (a symlink, re-pointed on replug)",
    )
    line.add_argument(
        "--baud", type=int, default=baud,
        help=f"pace bytes at this line rate, 8N1 (default {baud}; 0 = unpaced)",
    )
    line.add_argument(
        "--sent-log", metavar="FILE",
        help="write one JSON line per transmitted chunk (label, intact or not, hex) to FILE",
    )
    clock = parser.add_argument_group("device clock")
    clock.add_argument(
        "--time-scale", type=float, default=1.0, metavar="X",
        help="the device clock runs X times faster than real time (default 1; 100 plays an "
        "8-hour trip in under 5 minutes)",
    )
    clock.add_argument(
        "--start", metavar="TS",
        help="the device clock's initial time, RFC 3339 (default: the host's clock now)",
    )
    clock.add_argument(
        "--duration", type=float, metavar="SECONDS",
        help="stop after this many device-clock seconds (default: run until interrupted)",
    )
    noise = parser.add_argument_group("line noise")
    noise.add_argument("--ber", type=float, default=0.0, help="bit-error rate (default 0)")
    noise.add_argument(
        "--drop", type=float, default=0.0, help="probability that a byte is lost (default 0)"
    )
    noise.add_argument(
        "--garbage", type=float, default=0.0,
        help="garbage bytes as a fraction of the bytes sent, in bursts (default 0; 0.01 = 1%%)",
    )
    noise.add_argument(
        "--burst", type=int, default=16, help="mean garbage burst length in bytes (default 16)"
    )
    noise.add_argument(
        "--unplug-every", type=float, default=0.0, metavar="SECONDS",
        help="mean device seconds between cable unplugs (default 0 = never)",
    )
    noise.add_argument(
        "--unplug-for", type=float, default=5.0, metavar="SECONDS",
        help="device seconds the cable stays out (default 5)",
    )
    noise.add_argument("--seed", type=int, help="random seed, to repeat a run exactly")


def clock_from_args(args: argparse.Namespace) -> ScaledClock:
    """The device clock described by --start and --time-scale."""
    if args.time_scale <= 0:
        raise SimulatorError(f"--time-scale must be > 0, not {args.time_scale}")
    start_ms = None
    if args.start is not None:
        try:
            start_ms = ts_to_ms(args.start)
        except RecordError as err:
            raise SimulatorError(f"--start: {err}") from err
    return ScaledClock(start_ms, args.time_scale)


def noise_from_args(args: argparse.Namespace) -> Noise:
    """The line noise described by --ber, --drop, --garbage, --burst, --unplug-*, --seed."""
    try:
        config = NoiseConfig(
            ber=args.ber, drop=args.drop, garbage=args.garbage, burst=args.burst,
            unplug_every_s=args.unplug_every, unplug_for_s=args.unplug_for, seed=args.seed,
        )
    except ValueError as err:
        raise SimulatorError(str(err)) from err
    return Noise(config)


@contextlib.contextmanager
def _open_log(path: str | None) -> Iterator[IO[str] | None]:
    if path is None:
        yield None
        return
    try:
        stream = Path(path).open("w", encoding="utf-8")  # noqa: SIM115 (closed by the with below)
    except OSError as err:
        raise SimulatorError(f"cannot write --sent-log {path}: {err.strerror}") from err
    with stream:
        yield stream


def serve(
    args: argparse.Namespace,
    model_factory: Callable[[ScaledClock], DeviceModel],
    on_step: Callable[[int], None] | None = None,
) -> int:
    """Run one device model on a pty as ``frota sim`` does: print the path, stop on a signal."""
    clock = clock_from_args(args)
    noise = noise_from_args(args)
    if args.link is not None:
        link = Path(args.link)
        if link.exists() and not link.is_symlink():
            raise SimulatorError(f"--link {link} exists and is not a symlink; choose another path")
        if not link.parent.is_dir():
            raise SimulatorError(f"--link {link}: directory {link.parent} does not exist")
    model = model_factory(clock)
    with _open_log(args.sent_log) as log_stream:
        station = Station(
            model=model, port=PtyPort(args.link, args.baud), noise=noise,
            sent_log=SentLog(log_stream) if log_stream is not None else None,
            announce=sys.stdout,
        )
        return run_stations([station], clock, args.duration, on_step)


def run_stations(
    stations: Sequence[Station],
    clock: ScaledClock,
    duration_s: float | None,
    on_step: Callable[[int], None] | None = None,
) -> int:
    """Open the stations, run until the duration or SIGINT/SIGTERM, then close everything."""
    runner = Runner(stations, clock)

    def stop(signum: int, frame: FrameType | None) -> None:
        runner.stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    until = None if duration_s is None else clock.now_ms() + int(duration_s * 1000)
    try:
        try:
            runner.open()
        except OSError as err:
            raise SimulatorError(f"cannot open a pseudo-terminal: {err}") from err
        runner.run(until, on_step)
    finally:
        runner.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
