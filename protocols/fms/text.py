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
        end = max(pending.rfind(b"\r"), pending.rfind(b"\n"))
        if end >= 0:
            complete = bytes(pending[: end + 1])
            del pending[: end + 1]
            lines = complete.splitlines(keepends=True)
            if self._overflow:  # the rest of an overlong line, up to its end
                self._overflow = False
                self.stats.bytes_dropped += len(lines[0])
                del lines[0]
            for line in lines:
                frame = self._line(line.rstrip(_ENDS), len(line))
                if frame is not None:
                    yield frame
        if len(pending) > MAX_LINE:
            self._garbage(bytes(pending), len(pending), "line longer than 256 characters")
            pending.clear()
            self._overflow = True

    def finish(self) -> Iterator[CanFrame]:
        """End of stream: a last line without its line end is still read."""
        line = bytes(self._pending)
        self._pending.clear()
        if line and not self._overflow:
            frame = self._line(line, len(line))
            if frame is not None:
                yield frame
        elif line:
            self.stats.bytes_dropped += len(line)
        self._overflow = False

    def _garbage(self, line: bytes, size: int, why: str) -> None:
        self.stats.malformed += 1
        self.stats.bytes_dropped += size
        self.stats.reject(why, line)

    def _line(self, raw: bytes, size: int) -> CanFrame | None:
        """One line without its end (``size``: its length with the end, for the counts)."""
        if not raw.isascii():
            self._garbage(raw, size, "line is not ASCII")
            return None
        if len(raw) > MAX_LINE:
            self._garbage(raw, size, "line longer than 256 characters")
            return None
        text = raw.decode("ascii").strip()
        if not text or text.startswith("#"):
            return None
        try:
            if text[0] == "(":
                return parse_line(text)
            parsed = parse_slcan_line(text)
        except LineError as err:
            self._garbage(raw, size, str(err))
            return None
        if parsed is None:
            self.stats.skipped += 1  # an adapter's answer, not a frame
            return None
        frame, stamp = parsed
        if stamp is None:
            return frame
        return CanFrame(self._clock.seconds(stamp), frame.arbitration_id, frame.is_extended_id, frame.data)
