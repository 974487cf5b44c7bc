"""The canonical byte form of a record: what is hashed, signed and rebuilt byte for byte.

RFC 8785 (JSON Canonicalization Scheme, JCS) over the record after two normalizations, both
specified in docs/records.md ("Canonical form"):

1. timestamps (``ts``, ``scheduled``, ``incident_ts``) rewritten in UTC as
   ``YYYY-MM-DDTHH:MM:SS.sssZ`` (fractions below the millisecond truncated);
2. the numbers of :data:`PRECISION` rounded to their documented precision (Python's ``round``:
   the decimal nearest to the exact binary value, exact ties to even), so a value stored at that
   precision (a compacted day) gives the same bytes as the value the device produced.

JCS itself — keys sorted by their UTF-16 code units, no whitespace, strings as UTF-8 with only
the escapes JSON requires, numbers written as ECMAScript writes doubles — is the ``rfc8785``
library's (Trail of Bits), not hand-rolled here; ``orjson`` writes the same bytes faster for the
JSON it writes alike (``_as_orjson_writes_it``). Nothing else is added, dropped or reordered: a
field that is ``null`` stays ``null``, an unknown field is kept as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import orjson
import rfc8785

from protocols.fields import _canonical_ts_ms
from protocols.records import MAX_SAFE_INT, RecordError, ms_to_ts, ts_to_ms

#: Fields holding a record time, normalized to ``YYYY-MM-DDTHH:MM:SS.sssZ`` in UTC.
TIMESTAMP_FIELDS: Final = ("ts", "scheduled", "incident_ts")

#: (kind, field) → decimal places kept in the canonical form. Integer fields (``odometer_m``,
#: ``seq``, ``device_seq``, ``slot``, ``door``, ``boarded``, ``alighted``) are exact already.
PRECISION: Final[Mapping[tuple[str, str], int]] = {
    ("speed", "kmh"): 2,  # 0.01 km/h: the registrador's unit
    ("position", "lat"): 7,  # 1e-7 degree: about 1.1 cm
    ("position", "lon"): 7,
    ("position", "kmh"): 2,  # 0.01 km/h
    ("position", "course"): 2,  # 0.01 degree
}


def normalized(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The record with its timestamps in UTC milliseconds and its numbers at their precision
    (a new dict; ``rec`` is not changed). RecordError for a field that cannot be normalized."""
    out = dict(rec)
    for key in TIMESTAMP_FIELDS:
        value = out.get(key)
        if value is not None:
            try:
                out[key] = ms_to_ts(ts_to_ms(value))
            except ValueError as err:  # RecordError, or a year ms_to_ts cannot write
                raise RecordError(f"{key}: {value!r} cannot be written canonically") from err
    kind = out.get("kind")
    for (of_kind, key), places in PRECISION.items():
        value = out.get(key)
        if of_kind == kind and (type(value) is float or type(value) is int):
            out[key] = round(value, places)
    return out


def jcs(obj: Any) -> bytes:
    """RFC 8785 bytes of any JSON value (findings, checkpoints); RecordError if it has none
    (NaN or infinity, a number beyond the doubles, a lone surrogate, a non-JSON type)."""
    fast = _fast(obj)
    if fast is not None:
        return fast
    try:
        try:
            return rfc8785.dumps(obj)
        except rfc8785.IntegerDomainError:
            # JSON numbers are doubles (RFC 8785 §3.2.2.3, I-JSON): an integer beyond
            # ±(2**53 - 1) is the double nearest to it, as JSON.parse reads it. (Records never
            # carry one: validation bounds their integers; this is for unknown fields.)
            return rfc8785.dumps(_big_ints_as_doubles(obj))
    except (rfc8785.CanonicalizationError, UnicodeEncodeError, RecursionError,
            OverflowError) as err:
        raise RecordError(f"no canonical JSON form: {err}") from err


#: The fast path: ``orjson`` with sorted keys writes exactly RFC 8785's bytes for JSON whose
#: keys are ASCII (orjson sorts by code point, RFC 8785 by UTF-16 unit: the same on ASCII),
#: whose integers are within ±(2**53 - 1), and whose doubles are neither whole (orjson writes
#: ``80.0``, RFC 8785 ``80``: these are written as the integer they equal) nor in
#: [1e-6, 1e-5) (orjson ``1e-6``, RFC 8785 ``0.000001``); strings are escaped alike (every
#: character of U+0000–U+007F and others tested). ``tests/test_canonical.py`` checks it against
#: the library on arbitrary JSON, tests/trust/test_canonical_fast.py on flat objects. It is
#: ≈ 30x faster than ``rfc8785``'s pure Python, which writes everything else.
_NOT_FAST: Final = object()
_MAX_DEPTH: Final = 64


def _as_orjson_writes_it(obj: Any, depth: int) -> Any:
    """``obj`` with whole doubles as integers, or _NOT_FAST when orjson would write it
    differently from RFC 8785."""
    kind = type(obj)
    if kind is str or kind is bool or obj is None:
        return obj
    if kind is int:
        return obj if -MAX_SAFE_INT <= obj <= MAX_SAFE_INT else _NOT_FAST
    if kind is float:
        size = abs(obj)
        if not size < math.inf:  # NaN, infinity: orjson writes null, RFC 8785 has no form
            return _NOT_FAST
        if size.is_integer():
            return int(obj) if size <= MAX_SAFE_INT else _NOT_FAST
        return obj if not 1e-6 <= size < 1e-5 else _NOT_FAST
    if depth >= _MAX_DEPTH:
        return _NOT_FAST
    if kind is dict:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if type(key) is not str or not key.isascii():
                return _NOT_FAST
            ready = _as_orjson_writes_it(value, depth + 1)
            if ready is _NOT_FAST:
                return _NOT_FAST
            out[key] = ready
        return out
    if kind is list or kind is tuple:
        items = []
        for value in obj:
            ready = _as_orjson_writes_it(value, depth + 1)
            if ready is _NOT_FAST:
                return _NOT_FAST
            items.append(ready)
        return items
    return _NOT_FAST


def _fast(obj: Any) -> bytes | None:
    """RFC 8785 bytes written by orjson when it writes ``obj`` alike, else None."""
    ready = _as_orjson_writes_it(obj, 0)
    if ready is _NOT_FAST:
        return None
    try:
        return orjson.dumps(ready, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # a lone surrogate: the library says what is wrong
        return None


def _big_ints_as_doubles(obj: Any) -> Any:
    if type(obj) is int and abs(obj) > MAX_SAFE_INT:
        return float(obj)  # OverflowError beyond the doubles
    if isinstance(obj, list | tuple):
        return [_big_ints_as_doubles(item) for item in obj]
    if isinstance(obj, dict):
        return {key: _big_ints_as_doubles(value) for key, value in obj.items()}
    return obj


#: kind → {field: decimal places} (:data:`PRECISION` by kind, for the one-pass path).
_PLACES: Final[Mapping[str, Mapping[str, int]]] = {
    kind: {key: places for (k, key), places in PRECISION.items() if k == kind}
    for kind in {k for k, _ in PRECISION}
}
_NO_PLACES: Final[Mapping[str, int]] = {}
#: 10**places as a double (exact: a power of ten up to 10**22 is a double).
_SCALES: Final[Mapping[int, float]] = {places: float(10**places) for places in PRECISION.values()}
_FLAT_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def canonical(rec: Mapping[str, Any]) -> bytes:
    """The canonical bytes of one record (docs/records.md, "Canonical form")."""
    fast = _flat_record(rec)
    return fast if fast is not None else jcs(normalized(rec))


def _flat_record(rec: Mapping[str, Any]) -> bytes | None:
    """:func:`canonical` of a flat record (scalar values, ASCII keys) in ONE pass — normalizing
    and making it ready for orjson together, where ``jcs(normalized(rec))`` copies it twice and
    writes every timestamp again — or None for anything else (the two-step path then decides,
    errors included). Same bytes by construction: a timestamp already in the canonical form
    (``YYYY-MM-DDTHH:MM:SS.sssZ``, a valid instant) is its own normal form; strings, booleans,
    nulls and integers within ±(2**53 - 1) (orjson's ``OPT_STRICT_INTEGER`` refuses the others)
    are written by orjson as RFC 8785 writes them; only the doubles are looked at one by one
    (rounded to their precision, written as the integer they equal when whole) — what
    :func:`normalized` and :func:`_as_orjson_writes_it` do (tests/trust/test_canonical_fast.py
    checks the paths agree). Every record the collector stores is hashed here, so the checks
    that need no Python loop (keys, value types) are done in C."""
    if type(rec) is not dict:
        return None
    try:
        if not "".join(rec).isascii():  # every key a string (TypeError otherwise), all ASCII
            return None
    except TypeError:
        return None
    types = set(map(type, rec.values()))
    if not types <= _FLAT_TYPES:
        return None  # nested, or not JSON
    for key in TIMESTAMP_FIELDS:
        value = rec.get(key)
        if value is not None and (type(value) is not str or _canonical_ts_ms(value) is None):
            return None  # another offset or fraction, or not a time: the two-step path
    out = rec
    if float in types:
        out = dict(rec)
        places = _PLACES.get(rec.get("kind"), _NO_PLACES)  # type: ignore[arg-type]
        for key, value in rec.items():
            if type(value) is not float:
                continue
            if key in places:
                scale = _SCALES[places[key]]
                # Already at its precision (the agent rounds what it records): then
                # round(value, places) is value itself, and n / scale == value says so for
                # |value| < 1e6, where n / scale is the double nearest the decimal
                # n * 10**-places and a double's error is far below half a last place. The
                # check costs a multiplication and a division; round() writes the decimal out.
                if not (-1e6 < value < 1e6 and round(value * scale) / scale == value):
                    value = round(value, places[key])
            size = abs(value)
            if not size < math.inf or 1e-6 <= size < 1e-5:
                return None
            if size.is_integer():
                if size > MAX_SAFE_INT:
                    return None
                value = int(value)
            out[key] = value
    try:
        return orjson.dumps(out, option=orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER)
    except orjson.JSONEncodeError:  # an integer beyond ±(2**53 - 1), a lone surrogate
        return None
