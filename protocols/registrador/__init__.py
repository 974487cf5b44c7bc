"""The registrador (tachograph) serial protocol: frames, decoder, encoder (firmware-notes/registrador.md).

``RegistradorDecoder(vehicle).feed(bytes) -> list[record]``; ``encode_*`` build every frame
type (the simulator uses them; the agent uses ``encode_history_request``).
"""

from __future__ import annotations

from protocols.registrador.decoder import HistoryEnd, RegistradorDecoder
from protocols.registrador.encoder import (
    Slot,
    encode_device_event,
    encode_driver_event,
    encode_frame,
    encode_history_end,
    encode_history_record,
    encode_history_request,
    encode_incident,
    encode_status,
    encode_trip,
)
from protocols.registrador.scanner import FrameScanner, RawFrame, check_frame

__all__ = [
    "FrameScanner",
    "HistoryEnd",
    "RawFrame",
    "RegistradorDecoder",
    "Slot",
    "check_frame",
    "encode_device_event",
    "encode_driver_event",
    "encode_frame",
    "encode_history_end",
    "encode_history_record",
    "encode_history_request",
    "encode_incident",
    "encode_status",
    "encode_trip",
]
