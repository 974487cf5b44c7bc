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
library's (Trail of Bits), not hand-rolled here. Nothing else is added, dropped or reordered: a
field that is ``null`` stays ``null``, an unknown field is kept as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import rfc8785

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


def _big_ints_as_doubles(obj: Any) -> Any:
    if type(obj) is int and abs(obj) > MAX_SAFE_INT:
        return float(obj)  # OverflowError beyond the doubles
    if isinstance(obj, list | tuple):
        return [_big_ints_as_doubles(item) for item in obj]
    if isinstance(obj, dict):
        return {key: _big_ints_as_doubles(value) for key, value in obj.items()}
    return obj


def canonical(rec: Mapping[str, Any]) -> bytes:
    """The canonical bytes of one record (docs/records.md, "Canonical form")."""
    return jcs(normalized(rec))
