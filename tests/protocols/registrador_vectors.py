"""The hand-worked vectors of firmware-notes/registrador.md, read from the note itself.

Each fenced block ```` ```hex NAME ```` holds one frame, one field per line, ``#`` comments.
The expected records below are written from the note's prose (§9), not from running the decoder.
"""

from __future__ import annotations

import binascii
import re
from functools import cache
from typing import Any

from protocols.records import validate
from protocols.registrador import RegistradorDecoder
from tests.services import PROJECT

NOTE = PROJECT / "firmware-notes" / "registrador.md"
BLOCK = re.compile(r"^```hex (\w+)\n(.*?)^```", re.S | re.M)


@cache
def doc_vectors() -> dict[str, bytes]:
    """Vector name → frame bytes, parsed from the firmware note's hex blocks."""
    vectors = {}
    for name, body in BLOCK.findall(NOTE.read_text(encoding="utf-8")):
        digits = "".join(line.split("#", 1)[0] for line in body.splitlines())
        vectors[name] = bytes.fromhex("".join(digits.split()))
    return vectors


def frame(kind: int, seq: int, clock_ms: int, payload: bytes) -> bytes:
    """A frame laid out per the note §2 (CRC by binascii, the note's reference)."""
    body = bytes([len(payload), kind]) + seq.to_bytes(4, "big") + clock_ms.to_bytes(8, "big")
    body += payload
    return b"\xaa\x55" + body + binascii.crc_hqx(body, 0xFFFF).to_bytes(2, "big")


def decode(*chunks: bytes, vehicle: str = "ABC1D23") -> tuple[list[dict[str, Any]], RegistradorDecoder]:
    """Feed chunks one read at a time, then finish; every record is checked against the contract."""
    decoder = RegistradorDecoder(vehicle)
    records: list[dict[str, Any]] = []
    for chunk in chunks:
        records += decoder.feed(chunk)
    records += decoder.finish()
    for record in records:
        validate(record)
        assert record["vehicle"] == vehicle
        assert isinstance(record["device_seq"], int)
        bytes.fromhex(record["raw"])
    return records, decoder


def seqs(records: list[dict[str, Any]]) -> list[int]:
    """The frame numbers of the records, one per frame (consecutive repeats collapsed)."""
    out: list[int] = []
    for record in records:
        if not out or out[-1] != record["device_seq"]:
            out.append(record["device_seq"])
    return out


STATUS_RECORDS = [
    {"kind": "speed", "ts": "2026-03-02T14:00:00.000Z", "kmh": 87.5, "odometer_m": 123456,
     "ignition": True, "device_seq": 256},
    {"kind": "driver", "ts": "2026-03-02T14:00:00.000Z", "slot": 1, "driver": "04512345678",
     "activity": "drive", "device_seq": 256},
    {"kind": "driver", "ts": "2026-03-02T14:00:00.000Z", "slot": 2, "driver": "04598765432",
     "activity": "available", "device_seq": 256},
]

#: Vector name → the records the note says it decodes to (fields beyond vehicle and raw).
EXPECTED: dict[str, list[dict[str, Any]]] = {
    "status": STATUS_RECORDS,
    "driver_event": [
        {"kind": "driver", "ts": "2026-03-02T14:00:01.500Z", "slot": 1, "driver": "04512345678",
         "activity": "work", "device_seq": 257},
    ],
    "device_event": [
        {"kind": "device", "ts": "2026-03-02T14:00:02.000Z", "device": "registrador",
         "status": "clock_set", "detail": "clock set; it read 2026-03-02T13:59:50.000Z",
         "device_seq": 258},
    ],
    "console_trip": [
        {"kind": "trip", "ts": "2026-03-02T14:00:03.000Z", "event": "start", "trip": "T-0001",
         "line": "SP-0401", "scheduled": "2026-03-02T14:30:00.000Z", "device_seq": 259},
    ],
    "console_incident": [
        {"kind": "incident", "ts": "2026-03-02T14:00:04.000Z", "cause": "accident",
         "carrier_fault": False, "device_seq": 260},
    ],
    "history_request": [],
    "history_record": STATUS_RECORDS,
    "history_end": [],
}
