"""SAE J1939 29-bit identifiers: priority, data page, PDU format/specific, source address → PGN.

An identifier is laid out, from its most significant bit (firmware-notes/fms.md §1):
priority (3 bits) · extended data page (1) · data page (1) · PDU format PF (8) · PDU specific
PS (8) · source address SA (8). For PDU2 messages (PF ≥ 240, broadcast) the PGN is
EDP·DP·PF·PS; for PDU1 messages (PF < 240) PS is the destination address and the PGN's low
byte is 0. A dozen lines of bit arithmetic, so no library is pulled in for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The J1939 global (broadcast) destination address.
GLOBAL: Final = 0xFF
#: Lowest PDU format of PDU2 (broadcast) messages.
PDU2_MIN_PF: Final = 240
MAX_ID: Final = 0x1FFF_FFFF


@dataclass(frozen=True, slots=True)
class J1939Id:
    """The fields of a 29-bit J1939 identifier."""

    priority: int
    data_page: int
    """The two page bits (extended data page << 1 | data page); 0 for every FMS message."""
    pdu_format: int
    pdu_specific: int
    source_address: int

    @property
    def is_pdu1(self) -> bool:
        """A destination-specific message (PF < 240): PS is the destination address."""
        return self.pdu_format < PDU2_MIN_PF

    @property
    def pgn(self) -> int:
        """The parameter group number (PDU1: PS left out; PDU2: PS included)."""
        low = 0 if self.is_pdu1 else self.pdu_specific
        return (self.data_page << 16) | (self.pdu_format << 8) | low

    @property
    def destination(self) -> int:
        """The destination address: PS for PDU1, the global address for PDU2."""
        return self.pdu_specific if self.is_pdu1 else GLOBAL

    @property
    def can_id(self) -> int:
        """The 29-bit identifier these fields make."""
        return (
            (self.priority << 26)
            | (self.data_page << 24)
            | (self.pdu_format << 16)
            | (self.pdu_specific << 8)
            | self.source_address
        )


def parse_id(can_id: int) -> J1939Id:
    """Split a 29-bit identifier into its J1939 fields; ValueError if it is not 29 bits."""
    if not 0 <= can_id <= MAX_ID:
        raise ValueError(f"identifier 0x{can_id:x} is not a 29-bit CAN identifier")
    return J1939Id(
        priority=(can_id >> 26) & 0x7,
        data_page=(can_id >> 24) & 0x3,
        pdu_format=(can_id >> 16) & 0xFF,
        pdu_specific=(can_id >> 8) & 0xFF,
        source_address=can_id & 0xFF,
    )


def pgn_of(can_id: int) -> int:
    """The PGN of a 29-bit identifier (the decoder's hot path: no object built)."""
    pgn = (can_id >> 8) & 0x3FFFF
    if (pgn >> 8) & 0xFF < PDU2_MIN_PF:
        pgn &= 0x3FF00
    return pgn


def make_id(pgn: int, source: int, *, priority: int = 6, destination: int = GLOBAL) -> int:
    """The 29-bit identifier of a message ``pgn`` from ``source`` (to ``destination`` if PDU1)."""
    if not 0 <= pgn <= 0x3FFFF or not 0 <= source <= 0xFF or not 0 <= priority <= 7:
        raise ValueError(f"PGN 0x{pgn:x}, source 0x{source:x}, priority {priority} out of range")
    pf = (pgn >> 8) & 0xFF
    if pf < PDU2_MIN_PF:
        if pgn & 0xFF or not 0 <= destination <= 0xFF:
            raise ValueError(f"PDU1 PGN 0x{pgn:x} must end in 00 and take a destination 0-255")
        ps = destination
    else:
        ps = pgn & 0xFF
    return J1939Id(priority, pgn >> 16, pf, ps, source).can_id
