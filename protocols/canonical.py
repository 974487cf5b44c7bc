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

import math
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


def _plain(text: str) -> bool:
    """True for a string RFC 8785 writes as it is between quotes: printable ASCII without ``"``
    and ``\\`` (nothing to escape; UTF-16 order is then code point order)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _plain_number(value: int | float) -> str | None:
    """The RFC 8785 (ECMAScript) form of a number where Python's is provably the same, else None:
    integers up to 2**53 - 1 (and doubles with an integral value below that, written without
    ``.0``), and other finite doubles of magnitude in [1e-4, 1e16), where ``repr`` writes the
    shortest round-trip digits in plain notation exactly as ECMAScript's Number::toString does."""
    if type(value) is int:
        return str(value) if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else None
    if not math.isfinite(value):
        return None
    if float(value).is_integer():
        return str(int(value)) if abs(value) <= MAX_SAFE_INT else None
    return repr(value) if 1e-4 <= abs(value) < 1e16 else None


#: Keys already seen to be plain (records have few distinct keys; bounded).
_PLAIN_KEYS: set[str] = set()


def _flat(obj: Any) -> bytes | None:
    """RFC 8785 bytes of a flat object (a record: keys and string values of plain ASCII, numbers
    in :func:`_plain_number`'s domain, booleans, nulls) written directly — about 3x faster than
    the general serializer on the collector's hot path — or None to use the general one.
    tests/trust/test_canonical_fast.py checks it against ``rfc8785`` on arbitrary objects."""
    if type(obj) is not dict:
        return None
    parts: list[str] = []
    for key in sorted(obj) if all(type(k) is str for k in obj) else ():
        if key not in _PLAIN_KEYS:
            if not _plain(key):
                return None
            if len(_PLAIN_KEYS) < 1024:
                _PLAIN_KEYS.add(key)
        value = obj[key]
        kind = type(value)
        if kind is str:
            if '"' in value or "\\" in value:
                return None
            parts.append(f'"{key}":"{value}"')
        elif kind is int or kind is float:
            number = _plain_number(value)
            if number is None:
                return None
            parts.append(f'"{key}":{number}')
        elif value is None:
            parts.append(f'"{key}":null')
        elif kind is bool:
            parts.append(f'"{key}":{"true" if value else "false"}')
        else:
            return None
    if len(parts) != len(obj):
        return None
    text = "{" + ",".join(parts) + "}"
    # one check of the whole text: every string printable ASCII (nothing to escape)
    return text.encode() if text.isascii() and text.isprintable() else None


def jcs(obj: Any) -> bytes:
    """RFC 8785 bytes of any JSON value (findings, checkpoints); RecordError if it has none
    (NaN or infinity, a number beyond the doubles, a lone surrogate, a non-JSON type)."""
    flat = _flat(obj)
    if flat is not None:
        return flat
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
