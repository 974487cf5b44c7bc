"""The FMS messages Frota reads, described once in ``fms.dbc`` and read with cantools.

Why a DBC read by cantools and not construct bit structs: measured on TCO1 (8 bytes, 14 signals,
``python -m bench.fms_decode --compare``, firmware-notes/fms.md §2), cantools decodes ≈ 10 times
more frames per second than construct's ``BitStruct``, compiled or not (123,500/s against
11,700/s on a loaded 2-core machine; its bit unpacking is the C ``bitstruct`` extension). Both
would keep up with the 20 TCO1 a second, but the headroom matters on a Pi, and the DBC is also the
format other CAN tools read, so the same file documents the bus for a person with a laptop.

Signals are decoded and encoded as raw codes (``scaling=False``): J1939 ranges for error and
"not available" are on the raw value, and the scales are applied by the decoder. DI has no
fixed layout (ASCII fields, BAM when longer than 8 bytes) and is parsed here by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib.resources import files
from typing import Final

import cantools
from cantools.database.can import Database, Message

from protocols.fms.frames import CanFrame
from protocols.fms.j1939 import make_id

TCO1: Final = 0xFE6C
VDHR: Final = 0xFEC1
TD: Final = 0xFEE6
CCVS1: Final = 0xFEF1
DI: Final = 0xFE6B
DC1: Final = 0xFE4E
DC2: Final = 0xFDA5
TP_CM: Final = 0xEC00
TP_DT: Final = 0xEB00

#: Source addresses used by the encoders (the decoder accepts any source).
TACHOGRAPH: Final = 0xEE
BODY_CONTROLLER: Final = 0x21

#: 16-bit J1939 values: 0xFB00.. reserved, 0xFE00.. error, 0xFF00.. not available.
WORD_VALID_MAX: Final = 0xFAFF
WORD_ERROR: Final = 0xFE00
WORD_NA: Final = 0xFF00
#: 32-bit J1939 values likewise.
DWORD_VALID_MAX: Final = 0xFAFF_FFFF
DWORD_ERROR: Final = 0xFE00_0000
#: km/h per bit of TCO1's tachograph vehicle speed; m per bit of VDHR's distance.
KMH_PER_BIT: Final = 1 / 256
M_PER_BIT: Final = 5


def _load() -> Database:
    db = cantools.database.load_string(
        files("protocols.fms").joinpath("fms.dbc").read_text(encoding="utf-8"),
        database_format="dbc",
    )
    assert isinstance(db, Database)
    return db


DATABASE: Final = _load()
#: PGN → the DBC message (frames are matched by PGN, whatever their source address).
BY_PGN: Final[dict[int, Message]] = {
    (m.frame_id >> 8) & 0x3FFFF: m for m in DATABASE.messages
}


def decode_signals(pgn: int, data: bytes) -> dict[str, int]:
    """Raw signal codes of an 8-byte message; cantools' DecodeError if ``data`` is too short."""
    # Raw codes are ints with scaling=False.
    return BY_PGN[pgn].decode(data, decode_choices=False, scaling=False)  # type: ignore[return-value]


def encode_signals(pgn: int, values: Mapping[str, int]) -> bytes:
    """8 data bytes from raw codes; a signal left out is sent as "not available" (all ones),
    and bits no signal covers are 1, as J1939 asks."""
    message = BY_PGN[pgn]
    full: dict[str, int] = {}
    for signal in message.signals:
        code = values.get(signal.name, (1 << signal.length) - 1)
        if not 0 <= code < 1 << signal.length:
            raise ValueError(f"{message.name}.{signal.name}={code} does not fit {signal.length} bits")
        full[signal.name] = code
    return message.encode(full, scaling=False, padding=True, strict=False)


def _frame(pgn: int, source: int, priority: int, data: bytes) -> CanFrame:
    return CanFrame(None, make_id(pgn, source, priority=priority), True, data)


@dataclass(frozen=True, slots=True)
class Tco1:
    """TCO1's signals as raw codes (firmware-notes/fms.md §3); defaults are a parked bus."""

    Driver1WorkingState: int = 0
    Driver2WorkingState: int = 0
    VehicleMotion: int = 0
    Driver1TimeRelatedStates: int = 0
    Driver1Card: int = 0
    VehicleOverspeed: int = 0
    Driver2TimeRelatedStates: int = 0
    Driver2Card: int = 0
    SystemEvent: int = 0
    HandlingInformation: int = 0
    TachographPerformance: int = 0
    DirectionIndicator: int = 0
    OutputShaftSpeed: int = 0
    TachographVehicleSpeed: int = 0


def speed_code(kmh: float | None) -> int:
    """TCO1/CCVS1 speed code for ``kmh`` (None: not available), rounded to 1/256 km/h."""
    if kmh is None:
        return 0xFFFF
    code = round(kmh * 256)
    if not 0 <= code <= WORD_VALID_MAX:
        raise ValueError(f"speed {kmh} km/h is outside 0-250.996")
    return code


def encode_tco1(values: Tco1, *, source: int = TACHOGRAPH) -> CanFrame:
    """A TCO1 frame (priority 3, as tachographs send it)."""
    return _frame(TCO1, source, 3, encode_signals(TCO1, asdict(values)))


def encode_vdhr(distance_m: int | None, *, source: int = TACHOGRAPH) -> CanFrame:
    """A VDHR frame; the distance is rounded down to VDHR's 5 m (None: not available)."""
    code = 0xFFFF_FFFF if distance_m is None else distance_m // M_PER_BIT
    if not 0 <= code <= 0xFFFF_FFFF or (distance_m is not None and code > DWORD_VALID_MAX):
        raise ValueError(f"distance {distance_m} m is outside VDHR's range")
    return _frame(VDHR, source, 6, encode_signals(VDHR, {"TotalVehicleDistance": code}))


def encode_dc1(position: int, *, ramp: int = 3, status: int = 3,
               source: int = BODY_CONTROLLER) -> CanFrame:
    """A DC1 frame: position of doors 0 (one open), 1 (closing last), 2 (all closed), 14, 15."""
    return _frame(DC1, source, 6, encode_signals(
        DC1, {"PositionOfDoors": position, "Ramp": ramp, "Status": status}))


def _open_code(is_open: bool | None) -> int:
    return 3 if is_open is None else int(is_open)


def encode_dc2(door1_open: bool | None, door2_open: bool | None, *,
               source: int = BODY_CONTROLLER) -> CanFrame:
    """A DC2 frame with doors 1 and 2 open (1), closed (0) or not available (None); lock and
    enable are sent as not available."""
    return _frame(DC2, source, 6, encode_signals(
        DC2, {"Door1Open": _open_code(door1_open), "Door2Open": _open_code(door2_open)}))


def di_payload(driver1: str | None, driver2: str | None) -> bytes:
    """DI's bytes: ``driver1*driver2*`` in ASCII (an absent driver is an empty field)."""
    text = f"{driver1 or ''}*{driver2 or ''}*"
    if "*" in (driver1 or "") + (driver2 or ""):
        raise ValueError("a driver identification may not contain '*'")
    return text.encode("ascii")


def parse_di(payload: bytes) -> tuple[str | None, str | None]:
    """DI's bytes → (driver 1, driver 2) identification, None where a field is empty.

    Padding (0xFF, NUL) after the last field is ignored; a byte outside printable ASCII is a
    ValueError (the caller counts the message as malformed).
    """
    body = payload.rstrip(b"\xff\x00")
    if any(not 0x20 <= byte <= 0x7E for byte in body):
        raise ValueError("DI holds a byte outside printable ASCII")
    fields = body.decode("ascii").split("*")
    driver1 = fields[0].strip() or None
    driver2 = fields[1].strip() or None if len(fields) > 1 else None
    return driver1, driver2
