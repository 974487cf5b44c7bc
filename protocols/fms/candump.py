"""can-utils' candump log format: ``(1712345678.123456) can0 18FE6CEE#0123456789ABCDEF``.

``candump -l`` writes one frame per line: the receive time in seconds in parentheses, the
interface, then the identifier (3 hex digits: standard, 8: extended), ``#`` and the data bytes.
Remote frames (``123#R``) and CAN FD frames (``123##1...``) carry nothing FMS sends and are
rejected. python-can's ``CanutilsLogReader`` reads files, not a stream of lines that may be
torn mid-way, and raises on a bad line; this ~40-line parser is the decoder's, per line.
"""

from __future__ import annotations

from protocols.fms.frames import CanFrame


class LineError(ValueError):
    """A text line that is not a frame in the format it claims; the message says why."""


def _hex_id(text: str) -> tuple[int, bool]:
    if len(text) == 3:
        extended = False
    elif len(text) == 8:
        extended = True
    else:
        raise LineError(f"identifier {text[:12]!r} is not 3 or 8 hex digits")
    try:
        can_id = int(text, 16)
    except ValueError:
        raise LineError(f"identifier {text!r} is not hex") from None
    if (can_id > 0x7FF and not extended) or can_id > 0x1FFF_FFFF:
        raise LineError(f"identifier {text} is out of range")
    return can_id, extended


def _hex_data(text: str) -> bytes:
    if len(text) % 2 or len(text) > 16:
        raise LineError(f"data {text[:20]!r} is not 0-8 bytes of hex")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise LineError(f"data {text[:20]!r} is not hex") from None


def parse_line(line: str) -> CanFrame | None:
    """One candump log line → a frame; None for a blank line; LineError if it is not a frame."""
    words = line.split()
    if not words:
        return None
    if len(words) not in (3, 4) or not (words[0].startswith("(") and words[0].endswith(")")):
        raise LineError("not '(seconds) interface id#data'")
    try:
        timestamp = float(words[0][1:-1])
    except ValueError:
        raise LineError(f"time {words[0]!r} is not a number") from None
    if not 0 <= timestamp < 1e11:
        raise LineError(f"time {words[0]!r} is out of range")
    ident, sep, data = words[2].partition("#")
    if not sep:
        raise LineError("no '#' between identifier and data")
    if data.startswith(("R", "#")):
        raise LineError("a remote or CAN FD frame")
    can_id, extended = _hex_id(ident)
    return CanFrame(timestamp, can_id, extended, _hex_data(data))


def format_line(frame: CanFrame, channel: str = "can0") -> str:
    """A frame as a candump log line (without the newline); time 0 when the frame has none."""
    ident = f"{frame.arbitration_id:08X}" if frame.is_extended_id else f"{frame.arbitration_id:03X}"
    return f"({frame.timestamp or 0.0:.6f}) {channel} {ident}#{frame.data.hex().upper()}"
