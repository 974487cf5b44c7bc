"""The hand-worked vectors of firmware-notes/fms.md, read from the note itself.

Each fenced block ```` ```candump NAME ```` holds candump log lines. The expected signal codes
and records below are written from the note's prose and tables (§10), not from running the
decoder.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from protocols.fms import FmsDecoder
from protocols.records import validate
from tests.services import PROJECT

NOTE = PROJECT / "firmware-notes" / "fms.md"
BLOCK = re.compile(r"^```candump (\w+)\n(.*?)^```", re.S | re.M)
LINE = re.compile(r"^\((\d+\.\d{6})\) can0 ([0-9A-F]{3}|[0-9A-F]{8})#([0-9A-F]*)$")


@cache
def doc_blocks() -> dict[str, str]:
    """Vector name → the block's text (candump lines), as in the note."""
    return dict(BLOCK.findall(NOTE.read_text(encoding="utf-8")))


def doc_frames(name: str) -> list[tuple[float, int, bytes]]:
    """A block's frames as (receive time, identifier, data), read with this file's own regex."""
    frames = []
    for line in doc_blocks()[name].splitlines():
        match = LINE.match(line)
        assert match, f"{name}: not a candump line: {line!r}"
        frames.append((float(match[1]), int(match[2], 16), bytes.fromhex(match[3])))
    return frames


def decode(*chunks: bytes, vehicle: str = "ABC1D23") -> tuple[list[dict[str, Any]], FmsDecoder]:
    """Feed chunks one read at a time, then finish; every record is checked against the contract."""
    decoder = FmsDecoder(vehicle)
    records: list[dict[str, Any]] = []
    for chunk in chunks:
        records += decoder.feed(chunk)
    records += decoder.finish()
    for record in records:
        validate(record)
        assert record["vehicle"] == vehicle
        bytes.fromhex(record["raw"])
    return records, decoder


#: Vector name → (identifier, the message's raw signal codes by the note's tables).
SIGNALS: dict[str, tuple[int, dict[str, int]]] = {
    "tco1_drive": (0x0CFE6CEE, {
        "Driver1WorkingState": 3, "Driver2WorkingState": 1, "VehicleMotion": 1,
        "Driver1TimeRelatedStates": 0, "Driver1Card": 1, "VehicleOverspeed": 0,
        "Driver2TimeRelatedStates": 0, "Driver2Card": 1, "SystemEvent": 0,
        "HandlingInformation": 0, "TachographPerformance": 0, "DirectionIndicator": 0,
        "OutputShaftSpeed": 14400, "TachographVehicleSpeed": 22400,
    }),
    "vdhr": (0x18FEC1EE, {"TotalVehicleDistance": 246913}),
    "td": (0x18FEE6EE, {
        "Seconds": 123, "Minutes": 5, "Hours": 14, "Month": 3, "Day": 10, "Year": 41,
        "LocalMinuteOffset": 125, "LocalHourOffset": 122,
    }),
    "dc2": (0x18FDA521, {
        "Door1Lock": 3, "Door1Open": 1, "Door1Enable": 3,
        "Door2Lock": 3, "Door2Open": 0, "Door2Enable": 3,
    }),
    "dc1": (0x18FE4E21, {"PositionOfDoors": 0, "Ramp": 3, "Status": 3}),
}

#: 2026-03-02T14:05:30.750Z, the TD vector (§10.3), in ms since the epoch.
TD_MS = 1_772_460_330_750
ODOMETER = 1_234_565
DRIVER1 = "04512345678"
DRIVER2 = "04598765432"

#: The records of §10.7, frame by frame (fields beyond vehicle and raw).
DRIVE_AND_STOP: list[dict[str, Any]] = [
    {"kind": "speed", "ts": "2026-03-02T14:05:30.670Z", "kmh": 87.5, "odometer_m": ODOMETER},
    {"kind": "driver", "ts": "2026-03-02T14:05:30.670Z", "slot": 1, "driver": None,
     "activity": "drive", "card": True},
    {"kind": "driver", "ts": "2026-03-02T14:05:30.670Z", "slot": 2, "driver": None,
     "activity": "available", "card": True},
    {"kind": "driver", "ts": "2026-03-02T14:05:31.250Z", "slot": 1, "driver": DRIVER1,
     "activity": "drive", "card": None},
    {"kind": "driver", "ts": "2026-03-02T14:05:31.250Z", "slot": 2, "driver": DRIVER2,
     "activity": "available", "card": None},
    {"kind": "speed", "ts": "2026-03-02T14:05:31.950Z", "kmh": 0.0, "odometer_m": ODOMETER},
    {"kind": "driver", "ts": "2026-03-02T14:05:31.950Z", "slot": 1, "driver": DRIVER1,
     "activity": "work", "card": None},
    {"kind": "door", "ts": "2026-03-02T14:05:32.050Z", "door": 1, "open": True},
    {"kind": "door", "ts": "2026-03-02T14:05:32.050Z", "door": 2, "open": False},
    {"kind": "speed", "ts": "2026-03-02T14:05:32.150Z", "kmh": 0.0, "odometer_m": ODOMETER},
    {"kind": "device", "ts": "2026-03-02T14:05:32.150Z", "device": "registrador",
     "status": "fault", "detail": "TCO1: tachograph performance event"},
]
