"""A received CAN frame, the form every FMS reader (candump, SLCAN, python-can) produces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class CanFrame:
    """One classic CAN data frame as received.

    The field names are python-can's ``can.Message`` ones, so a ``Message`` can be given to the
    decoder as it is (``FrameLike``).
    """

    timestamp: float | None
    """Receive time in seconds on the receiver's clock (candump's, the SLCAN adapter's
    unwrapped millisecond counter, python-can's); None when the capture has none. Only
    differences between frames are used: the device time comes from the tachograph (TD). A
    live reader should stamp with a monotonic clock (``time.monotonic()``): a wall clock set
    while reading misdates the frames until the next TD."""
    arbitration_id: int
    is_extended_id: bool
    data: bytes


class FrameLike(Protocol):
    """What the decoder reads from a frame: a ``CanFrame`` or a python-can ``Message``.

    A ``Message`` flagged ``is_error_frame`` or ``is_remote_frame`` is counted, not decoded."""

    @property
    def timestamp(self) -> float | None: ...

    @property
    def arbitration_id(self) -> int: ...

    @property
    def is_extended_id(self) -> bool: ...

    @property
    def data(self) -> bytes | bytearray: ...


def raw_hex(frame: FrameLike) -> str:
    """A frame as the records' ``raw`` hex: the identifier (4 bytes, 2 if standard), then the data."""
    width = 8 if frame.is_extended_id else 4
    return f"{frame.arbitration_id:0{width}x}{bytes(frame.data).hex()}"
