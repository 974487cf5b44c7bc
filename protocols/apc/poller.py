"""The agent's side of the APC-485 line: which request to send next, and how long to wait.

The agent owns the bus (it is the only master). It sends :meth:`Poller.next_request`, reads
the answer until :func:`reply_timeout_s` passes, and feeds both the request and the answer to
:attr:`Poller.decoder` with its best estimate of the time, exactly as a bus logger would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocols.apc.decoder import ApcDecoder
from protocols.apc.frames import ACK_RESET, HEADER_SIZE, MAX_ADDRESS, READ_COUNTS, encode_request
from protocols.records import Record

#: 8N1: ten bits on the wire per byte.
BITS_PER_BYTE = 10
#: A sensor starts its answer within this many ms of the end of the request (firmware-notes/apc.md).
TURNAROUND_MS = 20
#: Silence that ends a frame and separates frames: 3.5 character times, at least 2 ms.
MIN_GAP_MS = 2.0


def char_ms(baud: int) -> float:
    """Time one byte takes on the line, in ms."""
    return BITS_PER_BYTE * 1000.0 / baud


def reply_timeout_s(baud: int = 19_200, data: int = 6) -> float:
    """How long the poller waits for an answer: turnaround + the answer's bytes + a margin."""
    frame = HEADER_SIZE + data + 2
    return (TURNAROUND_MS + frame * char_ms(baud) + 3 * max(MIN_GAP_MS, 3.5 * char_ms(baud))) / 1000


class Poller:
    """Round-robin polling of the door sensors, acknowledging counter resets once seen."""

    def __init__(
        self, vehicle: str, addresses: Sequence[int], doors: Mapping[int, int] | None = None
    ) -> None:
        if not addresses or any(not 1 <= a <= MAX_ADDRESS for a in addresses):
            raise ValueError(f"APC addresses must be 1-{MAX_ADDRESS}: {list(addresses)}")
        self.addresses = list(addresses)
        self.decoder = ApcDecoder(vehicle, doors)
        self._next = 0
        #: address → its answer count when ACK_RESET was last sent: one ACK per answer seen.
        self._acked_at: dict[int, int] = {}

    def next_request(self) -> bytes:
        """The next frame to put on the bus: an ACK_RESET owed, else the next READ_COUNTS."""
        decoder = self.decoder
        owed = [a for a in decoder.pending_acks() if decoder.answers(a) > self._acked_at.get(a, 0)]
        if owed:
            self._acked_at[owed[0]] = decoder.answers(owed[0])
            return encode_request(owed[0], ACK_RESET)
        address = self.addresses[self._next]
        self._next = (self._next + 1) % len(self.addresses)
        return encode_request(address, READ_COUNTS)

    def feed(self, data: bytes, ts_ms: int | None) -> list[Record]:
        """Bytes seen on the bus (our request, the answer) at ``ts_ms`` → records (``None``: no
        time known yet; records are held, their passengers kept for the next one)."""
        return self.decoder.feed(data, ts_ms)
