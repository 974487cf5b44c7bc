"""A simulated serial port: the master side of a pseudo-terminal, paced at the line's baud rate.

The reader (the agent, a test, ``frota decode``) opens the *slave* path like any serial device,
e.g. ``serial.Serial(path)``. With ``link`` the slave path is also reachable at a fixed path (a
symlink, re-pointed atomically on replug), so a reader's configuration need not change.

Unplugging closes the master (and the simulator's handle on the slave): the reader's next read
fails (EIO, or pyserial's "device reports readiness to read but returned no data"), as when a USB
adapter is pulled. Replugging opens a new pair; the reader must reopen the (link) path.

A port is shared by threads (a device's thread writes while a test or a scenario unplugs it):
one lock makes open, unplug, read and each write to the descriptor whole steps, so a write never
reaches a descriptor closed (or, worse, reused by another file) under it; bytes not yet written
when the port is unplugged are lost, as on a cable pulled out. The line's pacing sleeps outside
the lock.

The standard library has the pty primitives (``os.openpty``, ``tty.setraw``); no serial library
simulates a device end, so this small wrapper is written here.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import threading
import time
import tty
from pathlib import Path

log = logging.getLogger(__name__)

#: Bits on the wire per byte at 8N1: start bit, 8 data bits, stop bit.
BITS_PER_BYTE = 10


class PtyPort:
    """The device end of a pseudo-terminal serial line."""

    def __init__(
        self, link: str | Path | None = None, baud: int = 115_200, stall_timeout_s: float = 0.5
    ) -> None:
        self.link = Path(link) if link is not None else None
        self.baud = baud
        self.stall_timeout_s = stall_timeout_s
        self.master: int | None = None
        self._slave: int | None = None
        self.slave_path = ""
        self._line_free_at = 0.0
        self._deaf_until = 0.0
        self._inbox = bytearray()
        self.bytes_written = 0
        self.overrun_bytes = 0
        self.opens = 0
        """How many times the port was opened (1 + replugs)."""
        # Reentrant: close() unplugs under it.
        self._lock = threading.RLock()

    @property
    def path(self) -> str:
        """The path a reader should open: the link if there is one, else the slave's path."""
        if self.link is not None:
            return str(self.link)
        return self.slave_path

    @property
    def plugged(self) -> bool:
        """True while the pty is open (the cable is in)."""
        return self.master is not None

    def open(self) -> str:
        """Open a new pty pair in raw mode, point the link at it and return :attr:`path`."""
        with self._lock:
            return self._open()

    def _open(self) -> str:
        master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(master, False)
        self.master, self._slave = master, slave
        self.slave_path = os.ttyname(slave)
        self.opens += 1
        if self.link is not None:
            tmp = self.link.with_name(f".{self.link.name}.{os.getpid()}.tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            tmp.symlink_to(self.slave_path)
            tmp.replace(self.link)
        self._line_free_at = time.monotonic()
        log.info("serial line at %s (%s)", self.path, self.slave_path)
        return self.path

    def unplug(self) -> None:
        """Close the pty (the reader sees a hangup); the link is left dangling."""
        with self._lock:
            self._unplug()

    def _unplug(self) -> None:
        for fd in (self.master, self._slave):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.master = self._slave = None
        self._inbox.clear()

    def close(self) -> None:
        """Unplug and remove the link."""
        self.unplug()
        if self.link is not None and self.link.is_symlink():
            with contextlib.suppress(OSError):
                self.link.unlink()

    def fileno(self) -> int:
        """The master's file descriptor (for select); ValueError when unplugged."""
        if self.master is None:
            raise ValueError("the port is unplugged")
        return self.master

    def transmit_seconds(self, nbytes: int) -> float:
        """Time the line takes to carry ``nbytes`` at the configured baud (0 if unpaced)."""
        return nbytes * BITS_PER_BYTE / self.baud if self.baud > 0 else 0.0

    def _pull(self) -> None:
        """Move whatever the reader sent into the inbox (non-blocking)."""
        if self.master is None:
            return
        while True:
            try:
                data = os.read(self.master, 4096)
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno == errno.EIO:  # no reader has the slave open: nothing to read
                    return
                raise
            if not data:
                return
            self._inbox += data

    def read(self) -> bytes:
        """Everything the reader has sent since the last call (never blocks)."""
        with self._lock:
            return self._read()

    def _read(self) -> bytes:
        self._pull()
        data = bytes(self._inbox)
        self._inbox.clear()
        return data

    def write(self, data: bytes) -> int:
        """Send ``data`` at the line rate; bytes the reader never drains are lost (an overrun),
        and so are those not yet sent when the port is unplugged (the cable pulled mid-frame)."""
        if self.master is None or not data:
            return 0
        opened = self.opens  # a replug mid-frame must not carry the frame's tail to the new pty
        now = time.monotonic()
        if self._line_free_at > now:  # the previous bytes are still on the wire
            time.sleep(self._line_free_at - now)
        view = memoryview(data)
        # After a write timed out (nobody reads), don't wait again for a second: drop at once.
        patience = 0.0 if time.monotonic() < self._deaf_until else self.stall_timeout_s
        deadline = time.monotonic() + patience
        sent = 0
        while sent < len(view):
            with self._lock:  # the descriptor is checked and used in one step (see the module)
                fd = self.master
                if fd is None or self.opens != opened:
                    break  # unplugged under the write: the rest never reaches the reader
                try:
                    sent += os.write(fd, view[sent:])
                    continue
                except BlockingIOError:
                    pass
                self._pull()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # Nobody drains the line: a real UART would keep transmitting into the void.
                self.overrun_bytes += len(view) - sent
                self._deaf_until = time.monotonic() + 1.0
                break
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile: seen above
                select.select([], [fd], [], min(remaining, 0.05))
        self.bytes_written += sent
        self._line_free_at = max(time.monotonic(), self._line_free_at) + self.transmit_seconds(
            len(data)
        )
        return sent
