"""The registrador's frames as construct definitions: the one description encoder and decoder share.

Spec: ``firmware-notes/registrador.md``. All multi-byte integers are big-endian. A frame is::

    AA 55 | LEN | TYPE | SEQ (u32) | CLOCK (u64, ms since the Unix epoch, UTC) | PAYLOAD (LEN) | CRC

and the CRC-16/IBM-3740 (poly 0x1021, init 0xFFFF, no reflection, xorout 0; ``binascii.crc_hqx``)
covers LEN through the end of PAYLOAD, sent high byte first.
"""

from __future__ import annotations

import binascii
from typing import Any, Final

from construct import (
    Bytes,
    Checksum,
    Const,
    Enum,
    Int8ub,
    Int16ub,
    Int32ub,
    Int64ub,
    PaddedString,
    RawCopy,
    Rebuild,
    Struct,
    Switch,
    len_,
    this,
)

# --- Framing (firmware note §2) -------------------------------------------------------------

SYNC: Final = b"\xaa\x55"
#: Bytes before the payload: sync (2), LEN (1), TYPE (1), SEQ (4), CLOCK (8).
HEADER_SIZE: Final = 16
CRC_SIZE: Final = 2
#: A frame is HEADER_SIZE + LEN + CRC_SIZE bytes; LEN is one byte.
OVERHEAD: Final = HEADER_SIZE + CRC_SIZE
MAX_PAYLOAD: Final = 255


def crc16(data: bytes | bytearray | memoryview) -> int:
    """CRC-16/IBM-3740 (a.k.a. CCITT-FALSE): poly 0x1021, init 0xFFFF, check 0x29B1."""
    return binascii.crc_hqx(data, 0xFFFF)


#: The part the CRC covers: LEN, TYPE, SEQ, CLOCK, PAYLOAD.
BODY = Struct(
    "length" / Rebuild(Int8ub, len_(this.payload)),
    "type" / Int8ub,
    "seq" / Int32ub,
    "clock_ms" / Int64ub,
    "payload" / Bytes(this.length),
)

FRAME = Struct(
    "sync" / Const(SYNC),
    "body" / RawCopy(BODY),
    "crc" / Checksum(Int16ub, crc16, this.body.data),
)

# --- Frame types (firmware note §3) ---------------------------------------------------------

STATUS: Final = 0x01
DRIVER_EVENT: Final = 0x02
DEVICE_EVENT: Final = 0x03
CONSOLE: Final = 0x04
HISTORY_REQUEST: Final = 0x50
HISTORY_RECORD: Final = 0x51
HISTORY_END: Final = 0x52

#: Types the registrador numbers and keeps in its memory (answerable by history).
RECORDED_TYPES: Final = frozenset({STATUS, DRIVER_EVENT, DEVICE_EVENT, CONSOLE})

# --- Common fields ----------------------------------------------------------------------------

#: Driver activity codes (as on EU tachographs: 0 rest/break … 3 driving); 0xFF = no card.
ACTIVITY_CODES: Final = {0: "rest", 1: "available", 2: "work", 3: "drive"}
ACTIVITY_NONE: Final = 0xFF
ACTIVITY_BY_NAME: Final = {name: code for code, name in ACTIVITY_CODES.items()}

CARD_SIZE: Final = 16
CARD = PaddedString(CARD_SIZE, "ascii")

SLOT = Struct("card" / CARD, "activity" / Int8ub)

# --- 0x01 status (§3.1) -------------------------------------------------------------------------

#: Status flag bits.
FLAG_IGNITION: Final = 0x01
FLAG_CARD1: Final = 0x02
FLAG_CARD2: Final = 0x04
FLAG_COMPARTMENT: Final = 0x08
FLAG_TAMPER: Final = 0x10
FLAG_FAULT: Final = 0x20
FLAG_POWER: Final = 0x40

STATUS_PAYLOAD = Struct(
    "speed" / Int16ub,  # 0.01 km/h
    "odometer_m" / Int32ub,
    "flags" / Int8ub,
    "slot1" / SLOT,
    "slot2" / SLOT,
)
STATUS_SIZE: Final = 41

# --- 0x02 driver event (§3.2) -------------------------------------------------------------------

DRIVER_EVENTS: Final = {1: "card_in", 2: "card_out", 3: "activity"}

DRIVER_EVENT_PAYLOAD = Struct(
    "slot" / Int8ub,
    "event" / Int8ub,
    "card" / CARD,
    "activity" / Int8ub,
)
DRIVER_EVENT_SIZE: Final = 19

# --- 0x03 device event (§3.3) -------------------------------------------------------------------

#: Device event code → (canonical status, detail prefix).
DEVICE_EVENTS: Final = {
    1: ("fault", "fault"),
    2: ("ok", "fault cleared"),
    3: ("tamper", "tamper"),
    4: ("compartment_open", "compartment opened"),
    5: ("ok", "compartment closed"),
    6: ("power_loss", "power lost"),
    7: ("power_restored", "power restored"),
    8: ("clock_set", "clock set"),
}
DEVICE_EVENT_BY_NAME: Final = {
    "fault": 1,
    "fault_cleared": 2,
    "tamper": 3,
    "compartment_opened": 4,
    "compartment_closed": 5,
    "power_loss": 6,
    "power_restored": 7,
    "clock_set": 8,
}

DEVICE_EVENT_PAYLOAD = Struct(
    "event" / Int8ub,
    "code" / Int16ub,  # fault code; 0 when not a fault
    "value" / Int64ub,  # clock_set: the clock before it was set (ms); else 0
)
DEVICE_EVENT_SIZE: Final = 11

# --- 0x04 console (§3.4) ------------------------------------------------------------------------

TRIP_ID_SIZE: Final = 16
LINE_ID_SIZE: Final = 16
CONSOLE_ACTION = Enum(Int8ub, trip_start=1, trip_end=2, incident=3)
INCIDENT_CAUSES: Final = {
    1: "breakdown",
    2: "accident",
    3: "accident_victims",
    4: "force_majeure",
    5: "road_blocked",
    6: "other",
}
INCIDENT_CAUSE_BY_NAME: Final = {name: code for code, name in INCIDENT_CAUSES.items()}
#: carrier_fault byte: 0 no, 1 yes, 0xFF not declared.
CARRIER_FAULT_UNDECLARED: Final = 0xFF

TRIP = Struct(
    "trip" / PaddedString(TRIP_ID_SIZE, "ascii"),
    "line" / PaddedString(LINE_ID_SIZE, "ascii"),
    "scheduled_ms" / Int64ub,  # 0 = none (always 0 on trip_end)
)
INCIDENT = Struct("cause" / Int8ub, "carrier_fault" / Int8ub)

CONSOLE_PAYLOAD = Struct(
    "action" / CONSOLE_ACTION,
    "detail" / Switch(this.action, {"trip_start": TRIP, "trip_end": TRIP, "incident": INCIDENT}),
)

# --- 0x50 history request, 0x51 history record, 0x52 history end (§4) -------------------------

HISTORY_RANGE = Struct("first" / Int32ub, "last" / Int32ub)
HISTORY_END_PAYLOAD = Struct(
    "first" / Int32ub,
    "last" / Int32ub,
    "sent" / Int32ub,  # how many history records answered the request
    "oldest" / Int32ub,  # the oldest frame number still in memory
)
HISTORY_END_SIZE: Final = 16

#: Payload Structs by frame type (the 0x51 payload is a whole frame, parsed with FRAME).
PAYLOADS: Final[dict[int, Any]] = {
    STATUS: STATUS_PAYLOAD,
    DRIVER_EVENT: DRIVER_EVENT_PAYLOAD,
    DEVICE_EVENT: DEVICE_EVENT_PAYLOAD,
    CONSOLE: CONSOLE_PAYLOAD,
    HISTORY_REQUEST: HISTORY_RANGE,
    HISTORY_END: HISTORY_END_PAYLOAD,
}

#: Compiled parsers (construct generates Python source once): ~3x faster than the plain Structs.
COMPILED: Final[dict[int, Any]] = {kind: struct.compile() for kind, struct in PAYLOADS.items()}
