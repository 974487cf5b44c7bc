"""Text captures → CAN frames: candump logs and SLCAN streams, line by line, torn reads allowed.

Lines end with LF (candump) or CR (SLCAN); each is recognised by its first character: ``(``
is a candump log line, ``t``/``T``/``r``/``R`` an SLCAN frame, anything an adapter answers is
skipped, ``#`` starts a comment. A line longer than ``MAX_LINE`` is garbage: its bytes are
dropped up to the next line end. Nothing here raises on input: bad lines are counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from protocols.base import DecoderStats
from protocols.fms.candump import LineError, parse_line
from protocols.fms.frames import CanFrame
from protocols.fms.slcan import LawicelClock, parse_slcan_line

#: Longest line kept (a candump line of an extended 8-byte frame is ~50 characters).
MAX_LINE: Final = 256
_ENDS: Final = b"\r\n"


class FrameReader:
    """Bytes of a candump log or an SLCAN stream in, frames out; counts into ``stats``."""

    def __init__(self, stats: DecoderStats) -> None:
        self.stats = stats
        self._pending = bytearray()
        self._overflow = False
        self._clock = LawicelClock()

    def feed(self, data: bytes) -> Iterator[CanFrame]:
        """The frames completed by ``data`` (a line torn across reads waits for its end)."""
        self.stats.bytes_in += len(data)
        pending = self._pending
        pending += data
        start = 0
        size = len(pending)
        while start < size:
            ends = [i for i in (pending.find(b"\r", start), pending.find(b"\n", start)) if i >= 0]
            if not ends:
                break
            end = min(ends)
            line = bytes(pending[start:end])
            start = end + 1
            if self._overflow:
                self._overflow = False
                self.stats.bytes_dropped += len(line) + 1
                continue
            frame = self._line(line)
            if frame is not None:
                yield frame
        del pending[:start]
        if len(pending) > MAX_LINE:
            self._garbage(bytes(pending), "line longer than 256 characters")
            pending.clear()
            self._overflow = True

    def finish(self) -> Iterator[CanFrame]:
        """End of stream: a last line without its line end is still read."""
        line = bytes(self._pending)
        self._pending.clear()
        if line and not self._overflow:
            frame = self._line(line)
            if frame is not None:
                yield frame
        elif line:
            self.stats.bytes_dropped += len(line)
        self._overflow = False

    def _garbage(self, line: bytes, why: str) -> None:
        self.stats.malformed += 1
        self.stats.bytes_dropped += len(line) + 1
        self.stats.reject(why, line)

    def _line(self, raw: bytes) -> CanFrame | None:
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            self._garbage(raw, "line is not ASCII")
            return None
        if not text or text.startswith("#"):
            return None
        try:
            if text[0] == "(":
                return parse_line(text)
            parsed = parse_slcan_line(text)
        except LineError as err:
            self._garbage(raw, str(err))
            return None
        if parsed is None:
            self.stats.skipped += 1  # an adapter's answer, not a frame
            return None
        frame, stamp = parsed
        if stamp is None:
            return frame
        return CanFrame(self._clock.seconds(stamp), frame.arbitration_id, frame.is_extended_id, frame.data)
