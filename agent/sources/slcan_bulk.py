"""python-can's SLCAN bus, reading the serial port in bulk instead of one byte per call.

python-can (4.x) ``slcanBus._read`` calls ``serial.read(1)`` once per byte and looks at each byte
for the line end: about 27 Python-level reads per CAN frame, which made the agent's FMS source
cost 3.1× the registrador's CPU (``python -m bench.agent_fms``) and fall behind under load. This
subclass overrides only ``_read``: it takes everything the port holds in one ``read`` (at least
one byte, so an idle line still waits up to the port's timeout), splits complete lines (``\\r``,
or ``\\a`` the adapter's error reply, as python-can does) and hands them out one per call.
Opening (``L`` for listen-only), closing, parsing each line into a ``can.Message`` and everything
else stay python-can's; nothing here transmits.

Hostile input: a line that is not text is dropped by itself (python-can kept it in its buffer,
so every later line joined it) and reported as python-can reports it (a ``can.CanOperationError``
caused by the ``UnicodeDecodeError``); bytes without a line end past :data:`MAX_LINE` are dropped
and reported as garbage too (a ``can.CanOperationError``), so a line that never ends cannot grow the buffer without bound.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

import can
import serial
from can.interfaces.slcan import slcanBus

#: The longest SLCAN line kept waiting for its end: a CAN FD frame (``B``, 8-digit id, 64 data
#: bytes) is 1 + 8 + 1 + 128 + 1 characters; anything longer is garbage.
MAX_LINE = 160
#: At most this many bytes taken per read (a backlog is split over calls, the buffer stays small).
READ_CHUNK = 4096
#: A complete line: python-can's terminators, ``\r`` (a frame, or OK) and ``\a`` (an error).
_LINE = re.compile(rb"[^\r\a]*[\r\a]")


class BulkSlcanBus(slcanBus):
    """``slcanBus`` whose ``_read`` takes the bytes waiting in one call and splits lines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lines: deque[bytes | None] = deque()  # None: bytes past MAX_LINE, dropped
        super().__init__(*args, **kwargs)

    def _read(self, timeout: float | None) -> str | None:
        """The next complete line as text (its terminator included, as python-can's), or None."""
        if not self._lines:
            self._fill(timeout)
        if not self._lines:
            return None
        line = self._lines.popleft()
        if line is None:
            raise can.CanOperationError(f"no SLCAN line end in {MAX_LINE} bytes: dropped")
        try:
            return line.decode()
        except UnicodeDecodeError as err:  # already out of the buffer: only this line is lost
            raise can.CanOperationError("an SLCAN line that is not text") from err

    def _fill(self, timeout: float | None) -> None:
        """Read until at least one complete line is buffered or ``timeout`` passes."""
        deadline = serial.Timeout(timeout)  # type: ignore[arg-type]  # None: no deadline
        port = self.serialPortOrig
        while True:
            try:
                chunk = port.read(min(max(1, port.in_waiting), READ_CHUNK))
            except Exception as err:  # as python-can's error_check: the line is gone
                raise can.CanOperationError(f"Could not read from serial device: {err}") from err
            if chunk:
                self._split(chunk)
                if self._lines:
                    return
            if deadline.expired():
                return

    def _split(self, chunk: bytes) -> None:
        buffer: bytearray = self._buffer
        buffer.extend(chunk)
        start = 0
        for match in _LINE.finditer(buffer):
            self._lines.append(match.group())
            start = match.end()
        del buffer[:start]
        if len(buffer) > MAX_LINE:
            buffer.clear()
            self._lines.append(None)

    def flush(self) -> None:
        """Forget lines read but not handed out, as python-can forgets its partial line."""
        self._lines.clear()
        super().flush()
