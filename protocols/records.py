"""The canonical record (../shared/design/contract.md): kinds, fields, timestamps, validation.

A record is a plain ``dict`` (JSON object) so that decoders, the agent's buffer, MQTT payloads,
the collector and the rules engine all pass the same thing around without conversion. This module
is the single place that knows which kinds and fields exist and how timestamps are written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from protocols.registry import DeviceValues

#: Version of the record schema carried in payload, file and bundle headers (not per record).
SCHEMA_VERSION: Final = 1

Record = dict[str, Any]

KINDS: Final = ("speed", "position", "driver", "door", "trip", "incident", "report", "device")
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


class RecordError(ValueError):
    """A record that does not follow the contract; the message says which field and why."""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms_to_ts(ms: int) -> str:
    """Milliseconds since the Unix epoch (UTC) → RFC 3339 with milliseconds and ``Z``."""
    seconds, millis = divmod(int(ms), 1000)
    dt = datetime.fromtimestamp(seconds, tz=UTC)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


def ts_to_ms(ts: str) -> int:
    """RFC 3339 (any offset, any fraction) → milliseconds since the Unix epoch; RecordError if bad."""
    if not isinstance(ts, str) or len(ts) < 19:
        raise RecordError(f"ts: {ts!r} is not an RFC 3339 timestamp")
    text = ts.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as err:
        raise RecordError(f"ts: {ts!r} is not an RFC 3339 timestamp") from err
    if dt.tzinfo is None:
        raise RecordError(f"ts: {ts!r} has no UTC offset")
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def now_ts() -> str:
    """The host's wall clock as a record timestamp (only for the agent's own estimates)."""
    return ms_to_ts(int(datetime.now(tz=UTC).timestamp() * 1000))


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


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _check_number(rec: Mapping[str, Any], key: str, lo: float, hi: float, *, optional: bool) -> None:
    if optional and rec.get(key) is None:
        return
    value = _need(rec, key)
    if not _is_number(value) or not lo <= float(value) <= hi:
        raise RecordError(f"{rec.get('kind')} record: {key}={value!r} is not a number in [{lo}, {hi}]")


def _check_int(rec: Mapping[str, Any], key: str, lo: int, *, optional: bool) -> None:
    if optional and rec.get(key) is None:
        return
    value = _need(rec, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise RecordError(f"{rec.get('kind')} record: {key}={value!r} is not an integer >= {lo}")


def _check_bool(rec: Mapping[str, Any], key: str, *, optional: bool) -> None:
    if optional and rec.get(key) is None:
        return
    value = _need(rec, key)
    if not isinstance(value, bool):
        raise RecordError(f"{rec.get('kind')} record: {key}={value!r} is not true or false")


def _check_choice(rec: Mapping[str, Any], key: str, choices: Sequence[str]) -> None:
    value = _need(rec, key)
    if value not in choices:
        raise RecordError(
            f"{rec.get('kind')} record: {key}={value!r} is not one of {', '.join(choices)}"
        )


def _check_str(rec: Mapping[str, Any], key: str, *, optional: bool, nullable: bool = False) -> None:
    if optional and key not in rec:
        return
    value = _need(rec, key)
    if value is None and nullable:
        return
    if not isinstance(value, str) or not value:
        raise RecordError(f"{rec.get('kind')} record: {key}={value!r} is not a non-empty string")


def validate(rec: Any) -> Record:
    """Check a record against the contract and return it; raise RecordError naming the field."""
    if not isinstance(rec, dict):
        raise RecordError(f"a record is a JSON object, not {type(rec).__name__}")
    kind = rec.get("kind")
    if kind not in KINDS:
        raise RecordError(f"kind={kind!r} is not one of {', '.join(KINDS)}")
    _check_str(rec, "vehicle", optional=False)
    ts_to_ms(_need(rec, "ts"))
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
    return rec


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
        raise RecordError(f"driver record: slot={slot!r} is not 1 or 2")
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
