"""Test-side devices on real pseudo-terminals: a registrador that talks, a door sensor that
answers polls. Frames are built with the protocols' own encoders; every frame sent is logged
so tests can check that each one reached the far end.

(The project's simulators, ``frota sim``, are used end to end; these are small, in-process and
fast, for the sources' own tests.)
"""

from __future__ import annotations

import threading
from pathlib import Path

from protocols.apc import DoorCounts, encode_counts
from protocols.apc.frames import READ_COUNTS
from protocols.registrador.encoder import encode_status
from simulators.pty import PtyPort
from tests.agent.helpers import T0_MS


class Device:
    """A pty plus a thread; ``talking`` pauses it, :meth:`close` ends it."""

    period_s = 0.02

    def __init__(self, link: Path, baud: int = 0) -> None:
        self.port = PtyPort(link, baud=baud)
        self.port.open()
        self.talking = threading.Event()
        self.talking.set()
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def path(self) -> str:
        """The path the agent opens."""
        return self.port.path

    def _run(self) -> None:
        while not self.stopped.wait(self.period_s):
            if self.talking.is_set() and self.port.plugged:
                with self.lock:
                    self.tick()

    def tick(self) -> None:
        """One period's work."""

    def close(self) -> None:
        """Stop the thread and remove the pty."""
        self.stopped.set()
        self.thread.join()
        self.port.close()


class Registrador(Device):
    """Status frames every 20 ms; its clock advances 1 s per frame (a 50× time scale)."""

    def __init__(self, link: Path) -> None:
        self.seq = 0
        self.sent: list[int] = []
        super().__init__(link)

    def clock_ms(self, seq: int) -> int:
        """The device time of frame ``seq``."""
        return T0_MS + seq * 1000

    def tick(self) -> None:
        """Send the next status frame."""
        self.seq += 1
        frame = encode_status(
            self.seq, self.clock_ms(self.seq), kmh=float(self.seq % 90), odometer_m=self.seq * 14,
            ignition=True,
        )
        self.port.write(frame)
        self.sent.append(self.seq)


class DoorSensor(Device):
    """APC sensor at ``address``: opens on poll 2, counts 2 in and 1 out per poll while open,
    closes on poll 4, then stays closed (so its totals are known: 4 boarded, 2 alighted)."""

    period_s = 0.002

    def __init__(self, link: Path, address: int = 1) -> None:
        self.address = address
        self.entered = 0
        self.exited = 0
        self.polls = 0
        super().__init__(link)

    def tick(self) -> None:
        """Answer a READ_COUNTS addressed to us."""
        data = self.port.read()
        if len(data) >= 6 and data[1] == self.address and data[2] == READ_COUNTS:
            self.polls += 1
            is_open = 2 <= self.polls < 4
            if is_open:
                self.entered += 2
                self.exited += 1
            counts = DoorCounts(open=is_open, entered=self.entered, exited=self.exited)
            self.port.write(encode_counts(self.address, counts))
