"""The record (docs/records.md): kinds, fields, validation.

A record is a plain ``dict`` (JSON object) so that decoders, the agent's buffer, MQTT payloads,
the collector and the rules engine all pass the same thing around without conversion. This module
is the single place that knows which kinds and fields exist and what a valid record is; the
formats of its scalar fields (vehicle ids, timestamps, integers) are ``protocols/fields.py``,
re-exported here; its canonical byte form (what the chain hashes) is ``protocols/canonical.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

# The field formats, re-exported: callers import them from here with the record.
from protocols.fields import _TS_MEMO, _VEHICLE_MEMO, _canonical_ts_ms, _memo
from protocols.fields import MAX_SAFE_INT as MAX_SAFE_INT
from protocols.fields import MAX_TS_MS as MAX_TS_MS
from protocols.fields import MIN_TS_MS as MIN_TS_MS
from protocols.fields import VEHICLE_ID_PATTERN as VEHICLE_ID_PATTERN
from protocols.fields import RecordError as RecordError
from protocols.fields import is_vehicle_id as is_vehicle_id
from protocols.fields import ms_to_ts as ms_to_ts
from protocols.fields import now_ms as now_ms
from protocols.fields import shown as shown
from protocols.fields import ts_to_ms as ts_to_ms
from protocols.registry import DeviceValues

#: Version of the record schema carried in payload, file and bundle headers (not per record).
SCHEMA_VERSION: Final = 1

Record = dict[str, Any]

KINDS: Final = ("speed", "position", "driver", "door", "trip", "incident", "report", "device",
                 "withdrawal")
#: Longest ``reason`` of a ``withdrawal`` (characters).
MAX_REASON_CHARS: Final = 200
ACTIVITIES: Final = ("drive", "work", "available", "rest", "unknown")
INCIDENT_CAUSES: Final = (
    "breakdown",
    "accident",
    "accident_victims",
    "force_majeure",
    "road_blocked",
    "other",
)
#: The ``device`` values: each registered device (protocols/registry.py), then the agent itself.
DEVICES: Final = DeviceValues("agent")
DEVICE_STATUSES: Final = (
    "ok",
    "fault",
    "tamper",
    "compartment_open",
    "power_loss",
    "power_restored",
    "disconnected",
    "silent",
    "blocked",
    "counter_reset",
    "clock_set",
    "clock_jump",
    "buffer_full",
)
TRIP_EVENTS: Final = ("start", "end")

COMMON_FIELDS: Final = ("vehicle", "ts", "kind", "agent", "seq", "device_seq", "raw")


def make_record(kind: str, vehicle: str, ts: str, **fields: Any) -> Record:
    """Build a record with the common fields first; ``None`` optional fields are dropped."""
    rec: Record = {"vehicle": vehicle, "ts": ts, "kind": kind}
    for key, value in fields.items():
        if value is not None or key in ("driver", "scheduled"):
            rec[key] = value
    return rec


def _need(rec: Mapping[str, Any], key: str) -> Any:
    if key not in rec:
        raise RecordError(f"{rec.get('kind')} record: missing field {key!r}")
    return rec[key]


def _check_number(rec: Mapping[str, Any], key: str, lo: float, hi: float, *, optional: bool) -> None:
    if optional and rec.get(key) is None:
        return
    value = _need(rec, key)
    if not _number_in(value, lo, hi):
        raise RecordError(f"{rec.get('kind')} record: {key}={shown(value)} is not a number in [{lo}, {hi}]")


def _check_int(rec: Mapping[str, Any], key: str, lo: int, *, optional: bool) -> None:
    if optional and rec.get(key) is None:
        return
    value = _need(rec, key)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= MAX_SAFE_INT:
        raise RecordError(
            f"{rec.get('kind')} record: {key}={shown(value)} is not an integer in [{lo}, {MAX_SAFE_INT}]"
        )


def _check_bool(rec: Mapping[str, Any], key: str, *, optional: bool) -> None:
    if optional and rec.get(key) is None:
        return
    value = _need(rec, key)
    if not isinstance(value, bool):
        raise RecordError(f"{rec.get('kind')} record: {key}={shown(value)} is not true or false")


def _check_choice(rec: Mapping[str, Any], key: str, choices: Sequence[str]) -> None:
    value = _need(rec, key)
    if value not in choices:
        raise RecordError(
            f"{rec.get('kind')} record: {key}={shown(value)} is not one of {', '.join(choices)}"
        )


def _check_str(rec: Mapping[str, Any], key: str, *, optional: bool, nullable: bool = False) -> None:
    if optional and key not in rec:
        return
    value = _need(rec, key)
    if value is None and nullable:
        return
    if not isinstance(value, str) or not value:
        raise RecordError(f"{rec.get('kind')} record: {key}={shown(value)} is not a non-empty string")


def _number_in(value: Any, lo: float, hi: float) -> bool:
    # type() rather than isinstance: bool is an int; NaN fails the comparison
    return (type(value) is float or type(value) is int) and lo <= value <= hi


def _fast_ts_ms(rec: dict[str, Any]) -> int | None:
    """ts in ms of a common speed or position record that passes every check of the full
    validation; None when it has anything unusual (the full path then decides). Written inline,
    without a call per field: it runs for nearly every record ``frota check`` reads."""
    get = rec.get
    vehicle = get("vehicle")
    if type(vehicle) is not str:
        return None
    raw = get("raw")  # the registrador's speed records carry their frame
    if raw is not None:
        if type(raw) is not str:
            return None
        try:
            bytes.fromhex(raw)  # what the full check accepts, whitespace between bytes included
        except ValueError:
            return None
    if vehicle not in _VEHICLE_MEMO:
        if not is_vehicle_id(vehicle):
            return None
        _memo(_VEHICLE_MEMO, vehicle, True)
    if "seq" in rec or "agent" in rec:
        agent = get("agent")
        seq = get("seq")
        if type(agent) is not str or not agent or type(seq) is not int \
                or not 1 <= seq <= MAX_SAFE_INT:
            return None
    device_seq = get("device_seq")
    if device_seq is not None and (type(device_seq) is not int
                                   or not 0 <= device_seq <= MAX_SAFE_INT):
        return None
    kind = get("kind")
    # type() rather than isinstance: bool is an int; NaN fails every comparison
    if kind == "speed":
        kmh = get("kmh")
        if not ((type(kmh) is float or type(kmh) is int) and 0 <= kmh <= 400):
            return None
        odometer = get("odometer_m")
        if odometer is not None and (type(odometer) is not int
                                     or not 0 <= odometer <= MAX_SAFE_INT):
            return None
        ignition = get("ignition")
        if ignition is not None and type(ignition) is not bool:
            return None
    elif kind == "position":
        lat = get("lat")
        lon = get("lon")
        if not ((type(lat) is float or type(lat) is int) and -90 <= lat <= 90
                and (type(lon) is float or type(lon) is int) and -180 <= lon <= 180):
            return None
        kmh = get("kmh")
        if kmh is not None and not ((type(kmh) is float or type(kmh) is int)
                                    and 0 <= kmh <= 2000):
            return None
        course = get("course")
        if course is not None and not ((type(course) is float or type(course) is int)
                                       and 0 <= course <= 360):
            return None
    else:
        return None
    ts = get("ts")
    if type(ts) is not str:
        return None
    ms = _TS_MEMO.get(ts)
    return _canonical_ts_ms(ts) if ms is None and len(ts) == 24 else ms


def validated_ts_ms(rec: Any) -> int:
    """Check a record against the format (docs/records.md); return its ``ts`` in ms.

    The one record validator. Speed and position records, nearly all of a bus's records, are
    checked inline first (one pass, no call per field); anything unusual about them, and every
    other kind, goes through the full checks, which accept it or raise RecordError naming the
    field. The inline pass only accepts what the full checks accept (tested).
    """
    if type(rec) is dict:
        ms = _fast_ts_ms(rec)
        if ms is not None:
            return ms
    return _full_check(rec)


def validate(rec: Any) -> Record:
    """Check a record against the format and return it; raise RecordError naming the field."""
    validated_ts_ms(rec)
    checked: Record = rec
    return checked


def _full_check(rec: Any) -> int:
    if not isinstance(rec, dict):
        raise RecordError(f"a record is a JSON object, not {type(rec).__name__}")
    kind = rec.get("kind")
    if kind not in KINDS:
        raise RecordError(f"kind={shown(kind)} is not one of {', '.join(KINDS)}")
    vehicle = _need(rec, "vehicle")
    if not is_vehicle_id(vehicle):
        raise RecordError(
            f"{kind} record: vehicle={shown(vehicle)} is not a vehicle id (1-64 letters, digits, "
            "'_', '.' or '-', starting with a letter or digit)"
        )
    ts_ms = ts_to_ms(_need(rec, "ts"))
    if "agent" in rec or "seq" in rec:
        _check_str(rec, "agent", optional=False)
        _check_int(rec, "seq", 1, optional=False)
    _check_int(rec, "device_seq", 0, optional=True)
    if rec.get("raw") is not None:
        raw = rec["raw"]
        if not isinstance(raw, str):
            raise RecordError(f"{kind} record: raw is not a hex string")
        try:
            bytes.fromhex(raw)
        except ValueError as err:
            raise RecordError(f"{kind} record: raw is not a hex string") from err
    _VALIDATORS[kind](rec)
    return ts_ms


def _speed(rec: Mapping[str, Any]) -> None:
    _check_number(rec, "kmh", 0, 400, optional=False)
    _check_int(rec, "odometer_m", 0, optional=True)
    _check_bool(rec, "ignition", optional=True)


def _position(rec: Mapping[str, Any]) -> None:
    _check_number(rec, "lat", -90, 90, optional=False)
    _check_number(rec, "lon", -180, 180, optional=False)
    _check_number(rec, "kmh", 0, 2000, optional=True)
    _check_number(rec, "course", 0, 360, optional=True)


def _driver(rec: Mapping[str, Any]) -> None:
    slot = _need(rec, "slot")
    if slot not in (1, 2) or isinstance(slot, bool):
        raise RecordError(f"driver record: slot={shown(slot)} is not 1 or 2")
    _check_str(rec, "driver", optional=False, nullable=True)
    _check_choice(rec, "activity", ACTIVITIES)


def _door(rec: Mapping[str, Any]) -> None:
    _check_int(rec, "door", 0, optional=False)
    _check_bool(rec, "open", optional=False)
    # Counts are absent when the source sees only the door's state (FMS door control).
    _check_int(rec, "boarded", 0, optional=True)
    _check_int(rec, "alighted", 0, optional=True)


def _trip(rec: Mapping[str, Any]) -> None:
    _check_choice(rec, "event", TRIP_EVENTS)
    _check_str(rec, "trip", optional=False)
    _check_str(rec, "line", optional=False)
    if rec.get("scheduled") is not None:
        ts_to_ms(rec["scheduled"])


def _incident(rec: Mapping[str, Any]) -> None:
    _check_choice(rec, "cause", INCIDENT_CAUSES)
    _check_bool(rec, "carrier_fault", optional=True)


def _report(rec: Mapping[str, Any]) -> None:
    if rec.get("finding") is None and rec.get("incident_ts") is None:
        raise RecordError("report record: needs finding or incident_ts")
    _check_str(rec, "finding", optional=True, nullable=True)
    if rec.get("incident_ts") is not None:
        ts_to_ms(rec["incident_ts"])
    _check_str(rec, "to", optional=False)


def _withdrawal(rec: Mapping[str, Any]) -> None:
    """An operator entry withdrawn by a later one (docs/records.md, "withdrawal")."""
    _check_int(rec, "withdraws", 1, optional=False)
    _check_str(rec, "reason", optional=False)
    if len(rec["reason"]) > MAX_REASON_CHARS:
        raise RecordError(f"withdrawal record: reason is longer than {MAX_REASON_CHARS} characters")
    if rec.get("entered") is not None:
        ts_to_ms(rec["entered"])


def _device(rec: Mapping[str, Any]) -> None:
    _check_choice(rec, "device", DEVICES)
    _check_choice(rec, "status", DEVICE_STATUSES)
    _check_str(rec, "detail", optional=True, nullable=True)


_VALIDATORS = {
    "speed": _speed,
    "position": _position,
    "driver": _driver,
    "door": _door,
    "trip": _trip,
    "incident": _incident,
    "report": _report,
    "device": _device,
    "withdrawal": _withdrawal,
}


def device_key(rec: Mapping[str, Any], ts_ms: int) -> str | None:
    """Which record of which device frame this is, for records with ``device_seq``; else None.

    ``kind:sub:device_seq:ts_ms``: one frame can give several records (a status frame gives
    ``speed`` and, on a change, ``driver`` for slot 1 and slot 2, or ``device`` records per
    flag), told apart by kind and ``sub`` (the driver slot, the device status, the door); the
    device time keeps a frame counter that wraps or restarts (a replaced registrador) from
    merging two different frames. The agent's buffer and the collector's store both key with it.
    """
    device_seq = rec.get("device_seq")
    if device_seq is None:
        return None
    sub = rec.get("slot") or rec.get("status") or rec.get("door") or 0
    return f"{rec['kind']}:{sub}:{device_seq}:{ts_ms}"


def dumps(rec: Mapping[str, Any]) -> str:
    """One record as a compact JSON line (no newline), keys in insertion order."""
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
