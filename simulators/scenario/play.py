"""Plays a scenario on the registrador, the GPS and the door counters, each on its own pseudo-terminal.

With ``tachograph="fms"`` the tachograph is played on the bus's FMS CAN interface instead, as an
SLCAN adapter on its pty (named ``fms``; :mod:`simulators.scenario.devices`); the trips and
incidents a console would have sent are handed to ``on_operator`` at their time, as an operator
would enter them (``frota collector enter trip|incident``).

One loop drives the three device models of :mod:`simulators.scenario.devices` on a manual
device clock that steps through the scenario one second at a time, so the registrador's and the
GPS's clocks follow the scenario's time exactly; wall time is paced at ``time_scale`` scenario
seconds per real second (as fast as the machine allows when it cannot keep up). Between steps
the loop answers the door counters' polls. Lines are unpaced (``baud 0``): at 1000× no serial
line rate could carry a second's frames in a millisecond.
"""

from __future__ import annotations

import logging
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from protocols.records import Record
from simulators.clock import ManualClock
from simulators.noise import Noise, NoiseConfig
from simulators.pty import PtyPort
from simulators.runner import Runner, Station
from simulators.scenario.devices import ScenarioDevices
from simulators.scenario.model import Scenario
from simulators.scenario.timeline import build

log = logging.getLogger(__name__)

DEVICE_NAMES = ("registrador", "gps", "apc")
#: The tachographs a scenario can be played on: its serial line, or the FMS CAN bus.
TACHOGRAPHS = ("registrador", "fms")


def device_names(tachograph: str = "registrador") -> tuple[str, str, str]:
    """The ptys' names for a play with this tachograph (the tachograph's first)."""
    return (tachograph, "gps", "apc")


@dataclass(frozen=True)
class PlayResult:
    """How a play went: scenario seconds played, wall seconds taken, whether it was interrupted."""

    seconds: int
    wall_s: float
    interrupted: bool


@contextmanager
def _stop_on_signals(runner: Runner) -> Iterator[None]:
    """SIGINT and SIGTERM end the play cleanly (only the main thread can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        runner.stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def play(
    sc: Scenario,
    *,
    time_scale: float = 1000.0,
    links: Path | None = None,
    noise: NoiseConfig | None = None,
    announce: IO[str] | None = None,
    lead_in_s: float = 1.0,
    tail_s: float = 1.0,
    on_second: Callable[[int], None] | None = None,
    on_ready: Callable[[dict[str, str]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    tachograph: str = "registrador",
    on_operator: Callable[[Record], None] | None = None,
    hold: Callable[[int], bool] | None = None,
) -> PlayResult:
    """Play a scenario on three ptys; print ``NAME PATH`` per device on ``announce`` first.

    ``on_ready`` gets {device name: tty path} once the lines are open (before the lead-in);
    ``on_second`` is called after each scenario second is played; the play ends early when
    ``should_stop()`` turns true (checked every second) or on SIGINT/SIGTERM in the main thread.
    ``tachograph="fms"`` plays the tachograph on FMS; ``on_operator`` then gets each console
    entry (trip, incident) the FMS bus does not carry, at its second. ``hold``: after the last
    second and the tail, the lines stay open and door-counter polls are answered (with the counts
    of the last second) while ``hold(polls answered so far)`` is true — a caller that drains the
    agent reading them waits until the agent has polled after the end, so passengers of the last
    stop are not left in the sensors.
    """
    if tachograph not in TACHOGRAPHS:
        raise ValueError(f"tachograph {tachograph!r} is not one of {', '.join(TACHOGRAPHS)}")
    if time_scale <= 0:
        raise ValueError(f"time scale must be > 0, not {time_scale}")
    tl = build(sc)
    clock = ManualClock(sc.start_ms - 1)
    devices = ScenarioDevices(tl, "fms" if tachograph == "fms" else "registrador")
    handed = 0
    stations = [
        Station(model=m, port=PtyPort(links / m.name if links else None, baud=0),
                noise=Noise(noise))
        for m in devices.models
    ]
    runner = Runner(stations, clock)
    apc_port = stations[2].port
    out = announce if announce is not None else sys.stdout
    with _stop_on_signals(runner):
        runner.open()
        try:
            for station in stations:
                print(f"{station.model.name} {station.port.path}", file=out, flush=True)
            if on_ready is not None:
                on_ready({st.model.name: st.port.path for st in stations})
            _serve_polls(runner, apc_port, clock.now_ms(), time.monotonic() + lead_in_s)
            start = time.monotonic()
            t = -1
            for t in range(tl.duration_s + 1):
                if should_stop is not None and should_stop():
                    runner.stopping = True
                if runner.stopping:
                    break
                now = tl.ms(t)
                devices.advance(t)
                clock.set(now)
                runner.step(now)
                entries = devices.operator_records(sc.vehicle)
                for rec in entries[handed:]:
                    if on_operator is not None:
                        on_operator(rec)
                handed = len(entries)
                if on_second is not None:
                    on_second(t)
                _serve_polls(runner, apc_port, now, start + (t + 1) / time_scale)
            wall = time.monotonic() - start
            if not runner.stopping:
                _serve_polls(runner, apc_port, clock.now_ms(), time.monotonic() + tail_s)
            while hold is not None and not runner.stopping and hold(devices.apc.requests):
                if should_stop is not None and should_stop():
                    break
                _serve_polls(runner, apc_port, clock.now_ms(), time.monotonic() + 0.05)
        finally:
            runner.close()
    played = t if runner.stopping else t + 1  # seconds 0 … t-1 (or t) were played
    log.info("played %d s of %s in %.1f s (%.0f×)", played, sc.name, wall,
             played / wall if wall > 0 else float("inf"))
    return PlayResult(played, wall, runner.stopping)


def _serve_polls(runner: Runner, apc_port: PtyPort, now_ms: int, until: float) -> None:
    """Answer door-counter polls (and nothing else new) until the wall clock reaches ``until``."""
    while not runner.stopping:
        remaining = until - time.monotonic()
        if remaining <= 0:
            return
        if not apc_port.plugged:
            time.sleep(min(remaining, 0.01))
            continue
        ready, _, _ = select.select([apc_port.fileno()], [], [], remaining)
        if ready:
            runner.step(now_ms)
