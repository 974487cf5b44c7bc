"""JSON Lines → validated canonical records, fast on the common kinds (speed, position).

``protocols.records.validate`` is the definition of a valid record; it costs several function
calls per field. Speed and position records (nearly all of a bus's records, at 1 Hz each) are
checked here inline instead; anything unusual about them — or any other kind — goes through
``validate``, which accepts it or names what is wrong. So the fast path only ever says "valid"
for records ``validate`` also accepts.
"""

from __future__ import annotations

from typing import Any

import orjson

from collector.rules.timeutil import fast_ts_ms
from protocols.records import Record, RecordError, validate

_SPEED_KEYS = frozenset(("vehicle", "ts", "kind", "kmh", "odometer_m", "ignition", "agent", "seq"))
_POSITION_KEYS = frozenset(("vehicle", "ts", "kind", "lat", "lon", "kmh", "course", "agent",
                            "seq"))


def _number(value: Any, lo: float, hi: float) -> bool:
    kind = type(value)
    return (kind is float or kind is int) and lo <= value <= hi  # NaN fails the comparison


def _common(rec: dict[str, Any]) -> bool:
    vehicle = rec.get("vehicle")
    if type(vehicle) is not str or not vehicle:
        return False
    if "seq" in rec or "agent" in rec:
        agent = rec.get("agent")
        seq = rec.get("seq")
        return type(agent) is str and bool(agent) and type(seq) is int and seq >= 1
    return True


def _fast_valid(rec: dict[str, Any]) -> bool:
    kind = rec.get("kind")
    if kind == "speed":
        if not rec.keys() <= _SPEED_KEYS or not _number(rec.get("kmh"), 0, 400):
            return False
        odometer = rec.get("odometer_m")
        if odometer is not None and (type(odometer) is not int or odometer < 0):
            return False
        ignition = rec.get("ignition")
        if ignition is not None and type(ignition) is not bool:
            return False
        return _common(rec)
    if kind == "position":
        if not rec.keys() <= _POSITION_KEYS:
            return False
        if not _number(rec.get("lat"), -90, 90) or not _number(rec.get("lon"), -180, 180):
            return False
        kmh = rec.get("kmh")
        if kmh is not None and not _number(kmh, 0, 2000):
            return False
        course = rec.get("course")
        if course is not None and not _number(course, 0, 360):
            return False
        return _common(rec)
    return False


def parse_line(line: bytes | str) -> tuple[int, Record]:
    """One JSON Lines line → (ts in ms, record); RecordError (or ValueError for bad JSON)."""
    rec = orjson.loads(line)
    if type(rec) is dict and _fast_valid(rec):
        ts = rec["ts"]
        if type(ts) is not str:
            raise RecordError(f"ts: {ts!r} is not an RFC 3339 timestamp")
        return fast_ts_ms(ts), rec
    validate(rec)
    return fast_ts_ms(rec["ts"]), rec
