"""Builds registrador frames from the construct definitions in :mod:`.frames` (simulator, agent).

Every function returns one complete frame (sync to CRC). Bad arguments (a card id that is not
ASCII or longer than 16 bytes, a speed out of range …) raise ``ValueError``: they are bugs in the
caller, not wire data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from construct import ConstructError

from protocols.registrador import frames as f


@dataclass(frozen=True)
class Slot:
    """A driver slot as the registrador reports it: the card in it (or None) and the activity."""

    card: str | None = None
    activity: str = "rest"
    """drive, work, available or rest; ignored (sent as 0xFF) when the slot is empty."""


def _build(con: Any, value: dict[str, Any]) -> bytes:
    try:
        data: bytes = con.build(value)
    except (ConstructError, UnicodeError) as err:
        raise ValueError(f"cannot build registrador frame field: {err}") from err
    return data


def encode_frame(kind: int, seq: int, clock_ms: int, payload: bytes) -> bytes:
    """Sync, LEN, TYPE, SEQ, CLOCK, PAYLOAD and the CRC over LEN…PAYLOAD."""
    if len(payload) > f.MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {f.MAX_PAYLOAD}")
    body = {"type": kind, "seq": seq, "clock_ms": clock_ms, "payload": payload}
    return _build(f.FRAME, {"body": {"value": body}})


def _activity_code(slot: Slot) -> int:
    if slot.card is None:
        return f.ACTIVITY_NONE
    try:
        return f.ACTIVITY_BY_NAME[slot.activity]
    except KeyError:
        raise ValueError(f"activity {slot.activity!r} is not drive, work, available or rest") from None


def encode_status(
    seq: int,
    clock_ms: int,
    *,
    kmh: float,
    odometer_m: int,
    ignition: bool,
    slot1: Slot = Slot(),
    slot2: Slot = Slot(),
    compartment_open: bool = False,
    tamper: bool = False,
    fault: bool = False,
    power_interrupted: bool = False,
) -> bytes:
    """A 0x01 status frame (speed in km/h, sent in units of 0.01 km/h)."""
    flags = (
        (f.FLAG_IGNITION if ignition else 0)
        | (f.FLAG_CARD1 if slot1.card is not None else 0)
        | (f.FLAG_CARD2 if slot2.card is not None else 0)
        | (f.FLAG_COMPARTMENT if compartment_open else 0)
        | (f.FLAG_TAMPER if tamper else 0)
        | (f.FLAG_FAULT if fault else 0)
        | (f.FLAG_POWER if power_interrupted else 0)
    )
    payload = _build(
        f.STATUS_PAYLOAD,
        {
            "speed": round(kmh * 100),
            "odometer_m": odometer_m,
            "flags": flags,
            "slot1": {"card": slot1.card or "", "activity": _activity_code(slot1)},
            "slot2": {"card": slot2.card or "", "activity": _activity_code(slot2)},
        },
    )
    return encode_frame(f.STATUS, seq, clock_ms, payload)


def encode_driver_event(seq: int, clock_ms: int, *, slot: int, event: str, state: Slot) -> bytes:
    """A 0x02 driver event: card_in, card_out or activity; ``state`` the slot after it.

    For card_out, ``state.card`` is the card that left and the activity is sent as 0xFF.
    """
    codes = {name: code for code, name in f.DRIVER_EVENTS.items()}
    if event not in codes:
        raise ValueError(f"driver event {event!r} is not one of {', '.join(codes)}")
    payload = _build(
        f.DRIVER_EVENT_PAYLOAD,
        {
            "slot": slot,
            "event": codes[event],
            "card": state.card or "",
            "activity": f.ACTIVITY_NONE if event == "card_out" else _activity_code(state),
        },
    )
    return encode_frame(f.DRIVER_EVENT, seq, clock_ms, payload)


def encode_device_event(seq: int, clock_ms: int, *, event: str, code: int = 0, value: int = 0) -> bytes:
    """A 0x03 device event (fault, fault_cleared, tamper, compartment_opened, … clock_set)."""
    if event not in f.DEVICE_EVENT_BY_NAME:
        raise ValueError(f"device event {event!r} is not one of {', '.join(f.DEVICE_EVENT_BY_NAME)}")
    payload = _build(
        f.DEVICE_EVENT_PAYLOAD,
        {"event": f.DEVICE_EVENT_BY_NAME[event], "code": code, "value": value},
    )
    return encode_frame(f.DEVICE_EVENT, seq, clock_ms, payload)


def encode_trip(
    seq: int, clock_ms: int, *, event: str, trip: str, line: str, scheduled_ms: int | None = None
) -> bytes:
    """A 0x04 console frame for a trip start or end (``event`` is start or end)."""
    if event not in ("start", "end"):
        raise ValueError(f"trip event {event!r} is not start or end")
    payload = _build(
        f.CONSOLE_PAYLOAD,
        {
            "action": f"trip_{event}",
            "detail": {"trip": trip, "line": line, "scheduled_ms": scheduled_ms or 0},
        },
    )
    return encode_frame(f.CONSOLE, seq, clock_ms, payload)


def encode_incident(seq: int, clock_ms: int, *, cause: str, carrier_fault: bool | None) -> bytes:
    """A 0x04 console frame for an incident (cause, carrier at fault: yes, no or undeclared)."""
    if cause not in f.INCIDENT_CAUSE_BY_NAME:
        raise ValueError(f"incident cause {cause!r} is not one of {', '.join(f.INCIDENT_CAUSE_BY_NAME)}")
    fault = f.CARRIER_FAULT_UNDECLARED if carrier_fault is None else int(carrier_fault)
    payload = _build(
        f.CONSOLE_PAYLOAD,
        {
            "action": "incident",
            "detail": {"cause": f.INCIDENT_CAUSE_BY_NAME[cause], "carrier_fault": fault},
        },
    )
    return encode_frame(f.CONSOLE, seq, clock_ms, payload)


def encode_history_request(first: int, last: int, request_id: int = 0, clock_ms: int = 0) -> bytes:
    """A 0x50 request (agent → registrador) for the recorded frames numbered first…last."""
    if not 0 <= first <= last <= 0xFFFF_FFFF:
        raise ValueError(f"history range {first}…{last} is not 0 <= first <= last < 2**32")
    payload = _build(f.HISTORY_RANGE, {"first": first, "last": last})
    return encode_frame(f.HISTORY_REQUEST, request_id, clock_ms, payload)


def encode_history_record(request_id: int, clock_ms: int, original: bytes) -> bytes:
    """A 0x51 history record: one original frame from memory, byte for byte, as the payload."""
    return encode_frame(f.HISTORY_RECORD, request_id, clock_ms, original)


def encode_history_end(
    request_id: int, clock_ms: int, *, first: int, last: int, sent: int, oldest: int
) -> bytes:
    """A 0x52 history end: the range asked, how many records were sent, the oldest one kept."""
    payload = _build(
        f.HISTORY_END_PAYLOAD, {"first": first, "last": last, "sent": sent, "oldest": oldest}
    )
    return encode_frame(f.HISTORY_END, request_id, clock_ms, payload)
