"""SLCAN (Lawicel ASCII) frames, as a CANable, USBtin or CANUSB adapter sends them over USB serial.

Each received frame is one line ended by CR: ``t`` + 3 hex identifier digits (standard) or
``T`` + 8 (extended), the data length (one digit 0-8), the data bytes in hex, and, when the
adapter's time stamps are on (``Z1``), 4 hex digits of milliseconds that wrap every 60 000 ms.
``r``/``R`` are remote frames. Everything else an adapter may send (CR alone: OK; BEL: error;
``z``/``Z``: a transmission done; ``V``, ``v``, ``N``, ``F`` answers) is not a frame.

python-can's ``slcan`` interface reads an adapter but raises on a garbage line and has no
encoder for the simulator's side, so the line format is written here (the agent still uses
python-can to open the adapter; this module is for ``frota decode`` and ``frota sim fms``).
"""

from __future__ import annotations

from typing import Final

from protocols.fms.candump import LineError
from protocols.fms.frames import CanFrame

#: The adapter's time stamp counter wraps at this many milliseconds.
WRAP_MS: Final = 60_000
#: First characters of lines an adapter sends that are not received frames.
NOT_FRAMES: Final = frozenset("zZVvNF\x07")


def encode_frame(frame: CanFrame, *, timestamp_ms: int | None = None) -> bytes:
    """A frame as the SLCAN line an adapter sends (CR included), with a time stamp if given.

    ``timestamp_ms`` is taken modulo 60 000, as the adapter's counter is.
    """
    data = bytes(frame.data)
    if len(data) > 8:
        raise ValueError("SLCAN carries classic CAN frames of 0-8 bytes")
    if frame.is_extended_id:
        if not 0 <= frame.arbitration_id <= 0x1FFF_FFFF:
            raise ValueError("extended identifier out of range")
        head = f"T{frame.arbitration_id:08X}"
    else:
        if not 0 <= frame.arbitration_id <= 0x7FF:
            raise ValueError("standard identifier out of range")
        head = f"t{frame.arbitration_id:03X}"
    tail = "" if timestamp_ms is None else f"{timestamp_ms % WRAP_MS:04X}"
    return f"{head}{len(data)}{data.hex().upper()}{tail}\r".encode("ascii")


def parse_slcan_line(line: str) -> tuple[CanFrame, int | None] | None:
    """One SLCAN line (without its CR) → (frame, the adapter's time stamp in ms or None).

    None for a line that is not a received frame (an adapter's answer, an empty OK); LineError
    for a line that starts like a frame and is not one. The frame's ``timestamp`` is None: the
    adapter's counter wraps every minute, and the caller unwraps it (``LawicelClock``).
    """
    if not line or line[0] in NOT_FRAMES:
        return None
    kind = line[0]
    if kind in "tr":
        id_len, extended = 3, False
    elif kind in "TR":
        id_len, extended = 8, True
    else:
        raise LineError(f"SLCAN line starts with {kind!r}, not t, T, r or R")
    head = line[1 : 1 + id_len]
    try:
        can_id = int(head, 16)
        length = int(line[1 + id_len], 16)
    except (ValueError, IndexError):
        raise LineError("SLCAN identifier or length is not hex") from None
    if len(head) != id_len or (extended and can_id > 0x1FFF_FFFF) or (not extended and can_id > 0x7FF):
        raise LineError("SLCAN identifier is out of range")
    if length > 8:
        raise LineError(f"SLCAN length {length} is more than 8 (CAN FD is not supported)")
    rest = line[2 + id_len :]
    digits = 0 if kind in "rR" else 2 * length
    if len(rest) not in (digits, digits + 4):
        raise LineError(f"SLCAN line of {len(line)} characters does not match length {length}")
    try:
        data = bytes.fromhex(rest[:digits])
        stamp = int(rest[digits:], 16) if len(rest) > digits else None
    except ValueError:
        raise LineError("SLCAN data or time stamp is not hex") from None
    if kind in "rR":
        raise LineError("a remote frame (FMS sends none)")
    if stamp is not None and stamp >= WRAP_MS:
        raise LineError(f"SLCAN time stamp {stamp} is not below {WRAP_MS}")
    return CanFrame(None, can_id, extended, data), stamp


class LawicelClock:
    """Unwraps an adapter's 60 000 ms counter into seconds that keep growing.

    A counter lower than the one before means the minute wrapped (a gap of a minute or more
    with no frame is indistinguishable from a shorter one: each TD re-anchors the time, so the
    error cannot outlive the next TD).
    """

    def __init__(self) -> None:
        self._last: int | None = None
        self._minutes = 0

    def seconds(self, stamp_ms: int) -> float:
        """The unwrapped receive time of a frame stamped ``stamp_ms``."""
        if self._last is not None and stamp_ms < self._last:
            self._minutes += 1
        self._last = stamp_ms
        return (self._minutes * WRAP_MS + stamp_ms) / 1000
