"""Simulated door passenger counters on one RS-485 line, answering polls (``frota sim apc``).

:class:`DoorSensor` is one head's state (door open, cumulative counters, status flags) with the
things that happen to it (passengers, a blocked beam, a reset); :class:`SensorBus` answers
READ_COUNTS and ACK_RESET by address with the frames of ``protocols.apc.frames`` — the Structs
the decoder parses. :class:`StopCycle` plays stops on its own (doors open, people board and
alight, doors close) for ``frota sim apc``; a scenario player can drive the sensors directly.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Any

from protocols.apc import frames
from simulators.cli import add_line_arguments, serve
from simulators.clock import ScaledClock
from simulators.errors import SimulatorError
from simulators.runner import Emission


@dataclass
class DoorSensor:
    """One sensor head over one door. It powers up with the counter-reset flag latched."""

    address: int
    open: bool = False
    entered: int = 0
    exited: int = 0
    blocked: bool = False
    tamper: bool = False
    counter_reset: bool = True
    resets: int = 0

    def board(self, n: int = 1) -> None:
        """``n`` passengers go in (the u16 counter wraps on the wire, not here)."""
        self.entered += n

    def alight(self, n: int = 1) -> None:
        """``n`` passengers go out."""
        self.exited += n

    def reset(self) -> None:
        """A power cycle or a maintenance reset: counters to 0, flag latched, RESETS + 1."""
        self.entered = self.exited = 0
        self.counter_reset = True
        self.resets = (self.resets + 1) % 256

    def counts(self) -> frames.DoorCounts:
        """The head's answer to READ_COUNTS, as the decoder will read it."""
        return frames.DoorCounts(
            open=self.open, entered=self.entered, exited=self.exited, blocked=self.blocked,
            tamper=self.tamper, counter_reset=self.counter_reset, resets=self.resets,
        )


class SensorBus:
    """All heads on the line: answers requests addressed to one of them, ignores the rest."""

    name = "apc"

    def __init__(self, sensors: list[DoorSensor], activity: StopCycle | None = None) -> None:
        self.sensors = {s.address: s for s in sensors}
        self.activity = activity
        self.requests = 0
        self._buf = bytearray()

    def next_due_ms(self) -> int | None:
        """When the stop cycle next changes something (the heads themselves only answer)."""
        return None if self.activity is None else self.activity.next_ms

    def due(self, now_ms: int) -> list[Emission]:
        """Advance the stop cycle; heads never transmit unasked."""
        if self.activity is not None:
            self.activity.advance(now_ms, self.sensors)
        return []

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """Requests (maybe split or garbled) → answers; the turnaround is the runner's loop."""
        self._buf += data
        out: list[Emission] = []
        pos = 0
        while pos < len(self._buf):
            verdict, size, frame = frames.scan(self._buf, pos)
            if verdict == "short":
                break
            pos += size
            if frame is None or frame.command & frames.RESPONSE:
                continue  # noise, or another head's answer heard on the shared line
            sensor = self.sensors.get(frame.address)
            if sensor is None or frame.data:
                continue  # not ours, broadcast, or not a request we know
            self.requests += 1
            if frame.command == frames.READ_COUNTS:
                out.append(Emission(frames.encode_counts(sensor.address, sensor.counts()),
                                    sensor.address))
            elif frame.command == frames.ACK_RESET:
                sensor.counter_reset = False
                out.append(Emission(frames.encode_ack(sensor.address), sensor.address))
        del self._buf[:pos]
        return out


class StopCycle:
    """Every ``every_s`` device seconds the doors open for ``dwell_s`` (shorter than ``every_s``:
    stops start ``every_s`` apart, as ``frota sim apc --help`` says); passengers pass one by one
    at random doors while they are open (seeded, so a run can be repeated)."""

    def __init__(
        self, start_ms: int, every_s: float = 120.0, dwell_s: float = 30.0,
        per_stop: int = 12, seed: int | None = None,
    ) -> None:
        if every_s <= 0 or dwell_s <= 0:
            raise ValueError("stop interval and dwell must be > 0")
        if dwell_s >= every_s:
            raise ValueError("the dwell must be shorter than the stop interval")
        self.every_ms = int(every_s * 1000)
        self.dwell_ms = int(dwell_s * 1000)
        self.per_stop = per_stop
        self.rng = random.Random(seed)
        self.next_ms = start_ms + self.every_ms
        self._plan: list[tuple[int, str]] = []  # (ms, action) within the current stop
        self._opened_ms = self.next_ms  # when the current (or next) stop's doors open

    def _plan_stop(self, open_ms: int) -> None:
        self._opened_ms = open_ms
        moves = [(open_ms + self.rng.randrange(1, max(2, self.dwell_ms)), self.rng.choice("ba"))
                 for _ in range(self.rng.randint(0, self.per_stop))]
        self._plan = [(open_ms, "open"), *sorted(moves), (open_ms + self.dwell_ms, "close")]

    def advance(self, now_ms: int, sensors: dict[int, DoorSensor]) -> None:
        """Apply every action due by ``now_ms``."""
        heads = list(sensors.values())
        while self.next_ms <= now_ms:
            if not self._plan:
                self._plan_stop(self.next_ms)
            _, action = self._plan.pop(0)
            if action == "open":
                for head in heads:
                    head.open = True
            elif action == "close":
                for head in heads:
                    head.open = False
            elif action == "b":
                self.rng.choice(heads).board()
            else:
                self.rng.choice(heads).alight()
            # The next stop opens every_ms after this one opened (not after it closed).
            self.next_ms = self._plan[0][0] if self._plan else self._opened_ms + self.every_ms


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim apc``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "apc",
        help="door passenger counters on RS-485 (APC-485), answering polls by address",
        description="Door passenger counters on a pseudo-terminal standing for the RS-485 "
        "line: one head per door at addresses FIRST..FIRST+DOORS-1, answering READ_COUNTS "
        "and ACK_RESET (firmware-notes/apc.md). Every --stop-every device seconds the doors "
        "open for --dwell seconds (shorter than --stop-every) and passengers board and alight. "
        "Prints the tty path.",
    )
    parser.add_argument("--doors", type=int, default=2, help="door heads on the line (default 2)")
    parser.add_argument("--first-address", type=int, default=1, metavar="N",
                        help="address of the first head (default 1)")
    parser.add_argument("--stop-every", type=float, default=120.0, metavar="SECONDS",
                        help="device seconds from one stop's doors opening to the next's "
                        "(default 120)")
    parser.add_argument("--dwell", type=float, default=30.0, metavar="SECONDS",
                        help="device seconds the doors stay open at a stop, less than "
                        "--stop-every (default 30)")
    parser.add_argument("--per-stop", type=int, default=12, metavar="N",
                        help="at most N passengers pass at a stop (default 12)")
    add_line_arguments(parser, baud=19_200)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve the door heads on a pty until interrupted or --duration."""
    last = args.first_address + args.doors - 1
    if args.doors < 1 or args.first_address < 1 or last > frames.MAX_ADDRESS:
        raise SimulatorError(f"door heads need addresses within 1-{frames.MAX_ADDRESS}")
    if args.stop_every <= 0 or args.dwell <= 0 or args.per_stop < 0:
        raise SimulatorError("--stop-every and --dwell must be > 0, --per-stop >= 0")
    if args.dwell >= args.stop_every:
        raise SimulatorError(f"--dwell ({args.dwell:g}) must be shorter than --stop-every "
                        f"({args.stop_every:g}): the doors open every --stop-every seconds")

    def make(clock: ScaledClock) -> SensorBus:
        heads = [DoorSensor(a) for a in range(args.first_address, last + 1)]
        cycle = StopCycle(clock.now_ms(), args.stop_every, args.dwell, args.per_stop, args.seed)
        return SensorBus(heads, cycle)

    return serve(args, make)
