"""FMS-Standard on CAN (firmware-notes/fms.md): J1939 identifiers, the messages, BAM, the decoder.

The public API, for ``frota decode``, the agent's FMS source and ``frota sim fms``:

- ``FmsDecoder(vehicle)``: ``feed(bytes)`` (candump log or SLCAN text), ``frame(frame)`` (a
  ``CanFrame`` or a python-can ``Message``), ``set_time(ms)``, ``finish()``.
- ``CanFrame``; ``candump.parse_line``/``format_line``; ``slcan.parse_slcan_line``,
  ``slcan.encode_frame``; ``j1939.parse_id``/``make_id``/``pgn_of``.
- Encoders from values, the same descriptions the decoder reads: ``encode_tco1(Tco1(...))``,
  ``encode_vdhr``, ``encode_td``, ``encode_di`` (one frame, or a BAM transfer),
  ``encode_dc1``, ``encode_dc2``.
"""

from __future__ import annotations

from protocols.fms import candump, j1939, slcan
from protocols.fms.clock import td_codes
from protocols.fms.decoder import FmsDecoder
from protocols.fms.frames import CanFrame, FrameLike, raw_hex
from protocols.fms.j1939 import J1939Id, make_id, parse_id, pgn_of
from protocols.fms.messages import (
    BODY_CONTROLLER,
    DI,
    TACHOGRAPH,
    TD,
    Tco1,
    di_payload,
    encode_dc1,
    encode_dc2,
    encode_signals,
    encode_tco1,
    encode_vdhr,
    speed_code,
)
from protocols.fms.stats import FmsStats
from protocols.fms.transport import encode_bam


def encode_td(ms: int, *, local_offset_min: int = 0, source: int = TACHOGRAPH) -> CanFrame:
    """A TD frame for the UTC time ``ms`` (rounded down to TD's 0.25 s)."""
    data = encode_signals(TD, td_codes(ms, local_offset_min=local_offset_min))
    return CanFrame(None, make_id(TD, source, priority=6), True, data)


def encode_di(driver1: str | None, driver2: str | None, *,
              source: int = TACHOGRAPH) -> list[CanFrame]:
    """DI for two slots: one frame (padded with 0xFF) when it fits 8 bytes, else a BAM."""
    payload = di_payload(driver1, driver2)
    if len(payload) <= 8:
        return [CanFrame(None, make_id(DI, source, priority=6), True, payload.ljust(8, b"\xff"))]
    return encode_bam(DI, payload, source=source)


__all__ = [
    "BODY_CONTROLLER",
    "TACHOGRAPH",
    "CanFrame",
    "FmsDecoder",
    "FmsStats",
    "FrameLike",
    "J1939Id",
    "Tco1",
    "candump",
    "encode_bam",
    "encode_dc1",
    "encode_dc2",
    "encode_di",
    "encode_tco1",
    "encode_td",
    "encode_vdhr",
    "j1939",
    "make_id",
    "parse_id",
    "pgn_of",
    "raw_hex",
    "slcan",
    "speed_code",
]
