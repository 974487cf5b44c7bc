"""Runs device models on pseudo-terminals: pacing, input, noise, unplugs and the log of what was sent.

A *device model* (``DeviceModel``) knows a device's state and builds its bytes; it does no I/O
and reads no clock (the runner passes the device time in). A :class:`Station` pairs one model
with one :class:`~simulators.pty.PtyPort` and its :class:`~simulators.noise.Noise`. The
:class:`Runner` drives any number of stations on one device clock, so a whole-trip scenario can
run the registrador, the GPS and the door counters in one process.
"""

from __future__ import annotations

import json
import logging
import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from simulators.clock import DeviceClock
from simulators.noise import Noise
from simulators.pty import PtyPort

log = logging.getLogger(__name__)

#: Longest real time the runner sleeps between looks at its stations (seconds).
MAX_WAIT_S = 0.05


@dataclass(frozen=True)
class Emission:
    """One chunk a device transmits (a frame, a sentence, a reply) and a label for the sent log."""

    data: bytes
    label: int | str | None = None


class DeviceModel(Protocol):
    """A device's behaviour without I/O: what it transmits when, and how it answers input."""

    name: str

    def next_due_ms(self) -> int | None:
        """Device time of its next spontaneous transmission, or None if it only answers."""
        ...

    def due(self, now_ms: int) -> list[Emission]:
        """The spontaneous transmissions whose time has come at ``now_ms``."""
        ...

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """Bytes from the reader (requests, maybe partial or garbled) → replies to transmit."""
        ...


class SentLog:
    """JSON Lines of every chunk a device produced and whether it went out intact."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, device: str, now_ms: int, emission: Emission, *, sent: bool, intact: bool) -> None:
        """Log one chunk: ``sent`` is false while unplugged, ``intact`` false if noise hit it."""
        entry: dict[str, Any] = {
            "device": device,
            "ms": now_ms,
            "label": emission.label,
            "sent": sent,
            "intact": sent and intact,
            "hex": emission.data.hex(),
        }
        self.stream.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.stream.flush()


@dataclass
class Station:
    """One device model on one serial line with its noise."""

    model: DeviceModel
    port: PtyPort
    noise: Noise = field(default_factory=Noise)
    sent_log: SentLog | None = None
    announce: IO[str] | None = None
    """Where to print the tty path at open and on every replug (stdout for ``frota sim``)."""
    next_unplug_ms: int | None = None
    replug_at_ms: int | None = None

    def open(self, now_ms: int) -> str:
        """Open the port, announce its path and schedule the first unplug."""
        path = self.port.open()
        if self.announce is not None:
            print(path, file=self.announce, flush=True)
        self._schedule_unplug(now_ms)
        return path

    def _schedule_unplug(self, now_ms: int) -> None:
        delay = self.noise.next_unplug_in_s()
        self.next_unplug_ms = None if delay is None else now_ms + int(delay * 1000)

    def check_cable(self, now_ms: int) -> None:
        """Pull or put back the cable when its time has come."""
        if self.port.plugged and self.next_unplug_ms is not None and now_ms >= self.next_unplug_ms:
            log.info("%s: cable unplugged", self.model.name)
            self.port.unplug()
            self.replug_at_ms = now_ms + int(self.noise.config.unplug_for_s * 1000)
        elif not self.port.plugged and self.replug_at_ms is not None and now_ms >= self.replug_at_ms:
            log.info("%s: cable plugged back", self.model.name)
            self.replug_at_ms = None
            self.open(now_ms)

    def transmit(self, emission: Emission, now_ms: int) -> None:
        """Put one chunk on the line through the noise (lost if unplugged) and log it."""
        if not self.port.plugged:
            if self.sent_log is not None:
                self.sent_log.write(self.model.name, now_ms, emission, sent=False, intact=False)
            return
        wire, intact = self.noise.apply(emission.data)
        self.port.write(wire)
        if self.sent_log is not None:
            self.sent_log.write(self.model.name, now_ms, emission, sent=True, intact=intact)

    def wake_ms(self) -> int | None:
        """The earliest device time at which this station has something to do."""
        times = [self.model.next_due_ms(), self.next_unplug_ms, self.replug_at_ms]
        pending = [t for t in times if t is not None]
        return min(pending) if pending else None


class Runner:
    """Drives stations on one device clock until stopped or until a device time is reached."""

    def __init__(self, stations: Sequence[Station], clock: DeviceClock) -> None:
        self.stations = list(stations)
        self.clock = clock
        self.stopping = False

    def open(self) -> None:
        """Open every station's port (announcing the paths)."""
        now = self.clock.now_ms()
        for station in self.stations:
            station.open(now)

    def close(self) -> None:
        """Close every port and remove the links."""
        for station in self.stations:
            station.port.close()

    def step(self, now_ms: int) -> None:
        """Do everything due at ``now_ms``: cables, replies to input, spontaneous frames."""
        for station in self.stations:
            station.check_cable(now_ms)
            if station.port.plugged:
                incoming = station.port.read()
                if incoming:
                    for emission in station.model.receive(incoming, now_ms):
                        station.transmit(emission, now_ms)
            for emission in station.model.due(now_ms):
                station.transmit(emission, now_ms)

    def wait(self, until_ms: int | None) -> None:
        """Sleep until the next thing to do (or input arrives), at most :data:`MAX_WAIT_S`."""
        wakes = [w for w in (s.wake_ms() for s in self.stations) if w is not None]
        if until_ms is not None:
            wakes.append(until_ms)
        timeout = MAX_WAIT_S
        if wakes:
            timeout = min(timeout, self.clock.wall_seconds_until(min(wakes)))
        fds = [s.port.fileno() for s in self.stations if s.port.plugged]
        if fds:
            select.select(fds, [], [], timeout)
        elif timeout > 0:
            select.select([], [], [], timeout)

    def run(self, until_ms: int | None = None, on_step: Callable[[int], None] | None = None) -> None:
        """Loop: step, then wait; stop at ``until_ms`` (device time) or when :attr:`stopping`."""
        while not self.stopping:
            now = self.clock.now_ms()
            if on_step is not None:
                on_step(now)
            self.step(now)
            if until_ms is not None and now >= until_ms:
                break
            self.wait(until_ms)
