"""Door passenger counters (APC) on an RS-485 multi-drop line, polled by address (firmware-notes/apc.md).

``frames`` holds the Structs and the CRC (shared by decoder, poller and simulator), ``decoder``
turns a bus capture into ``door`` and ``device`` records, ``poller`` is the agent's master side.
"""

from __future__ import annotations

from protocols.apc.decoder import ApcDecoder, ApcStats
from protocols.apc.frames import (
    ACK_RESET,
    READ_COUNTS,
    DoorCounts,
    encode_ack,
    encode_counts,
    encode_request,
)
from protocols.apc.poller import Poller

__all__ = [
    "ACK_RESET",
    "READ_COUNTS",
    "ApcDecoder",
    "ApcStats",
    "DoorCounts",
    "Poller",
    "encode_ack",
    "encode_counts",
    "encode_request",
]
