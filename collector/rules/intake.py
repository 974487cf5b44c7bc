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


def _fast_valid(rec: dict[str, Any]) -> bool:
    """True only for a speed or position record that ``validate`` accepts (one inline pass)."""
    get = rec.get
    vehicle = get("vehicle")
    if type(vehicle) is not str or not vehicle or "raw" in rec or "device_seq" in rec:
        return False
    seq = get("seq")
    if seq is not None or "agent" in rec:
        agent = get("agent")
        if type(agent) is not str or not agent or type(seq) is not int or seq < 1:
            return False
    kind = get("kind")
    if kind == "speed":
        kmh = get("kmh")
        if not ((type(kmh) is float or type(kmh) is int) and 0 <= kmh <= 400):
            return False  # NaN fails the comparison too
        odometer = get("odometer_m")
        if odometer is not None and (type(odometer) is not int or odometer < 0):
            return False
        ignition = get("ignition")
        return ignition is None or type(ignition) is bool
    if kind == "position":
        lat = get("lat")
        lon = get("lon")
        if not ((type(lat) is float or type(lat) is int) and -90 <= lat <= 90):
            return False
        if not ((type(lon) is float or type(lon) is int) and -180 <= lon <= 180):
            return False
        kmh = get("kmh")
        if kmh is not None and not ((type(kmh) is float or type(kmh) is int) and 0 <= kmh <= 2000):
            return False
        course = get("course")
        return course is None or ((type(course) is float or type(course) is int)
                                  and 0 <= course <= 360)
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
