"""The canonical form of many flat records at once: the checks of the one-pass path done per
batch, for the agent's buffer, which hashes every record it captures (issue 16).

:func:`protocols.canonical.canonical` checks each record on its own (keys ASCII, values
scalars, timestamps already canonical, each double at its precision) before ``orjson`` writes
it. :func:`ready` does the same checks for a whole batch: the key and type checks once over all
the records' keys and values (in C), the timestamps and the doubles in one pass over the batch.
For each record it gives what ``orjson.dumps(…, option=OPTIONS)`` writes as that record's
canonical form (the record itself when nothing needs changing, else a copy with its doubles
normalized), or None when the record does not go this way: :func:`canonical` then decides (it
gives the same bytes by the longer road, or RecordError). ``orjson`` may still refuse an
object given here (an integer beyond ±(2**53 - 1), a lone surrogate): that record too is
:func:`canonical`'s. ``tests/trust/test_canonical_batch.py`` checks the bytes against
:func:`canonical` record by record.

A field set on a ready record after the checks (the agent's ``seq`` and ``prev``, a chain hash)
must be a value the one-pass path writes as RFC 8785 does: an ASCII string, an integer within
±(2**53 - 1) (``OPTIONS`` refuses the others).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from typing import Any, Final

import orjson

from protocols.canonical import (
    _FLAT_TYPES,
    _NO_PLACES,
    _PLACES,
    _SCALES,
    TIMESTAMP_FIELDS,
)
from protocols.fields import _canonical_ts_ms
from protocols.records import MAX_SAFE_INT

#: orjson's options for a ready record: keys sorted, integers beyond ±(2**53 - 1) refused.
OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def ready(recs: Sequence[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """For each record, the object ``orjson.dumps(…, option=OPTIONS)`` writes as its canonical
    form (the record itself, or a copy with its doubles normalized), or None when
    :func:`protocols.canonical.canonical` must decide."""
    if not recs:
        return []
    if any(type(rec) is not dict for rec in recs):
        return [None] * len(recs)
    try:
        if not "".join(chain.from_iterable(recs)).isascii():
            return [None] * len(recs)
    except TypeError:  # a key that is not a string
        return [None] * len(recs)
    types = set(map(type, chain.from_iterable(rec.values() for rec in recs)))
    if not types <= _FLAT_TYPES:
        return [None] * len(recs)
    out: list[dict[str, Any] | None] = list(recs)
    for key in TIMESTAMP_FIELDS:
        for i, rec in enumerate(recs):
            value = rec.get(key)
            if value is not None and (type(value) is not str or _canonical_ts_ms(value) is None):
                out[i] = None  # another offset or fraction, or not a time: canonical() decides
    if float in types:
        doubles = [(i, key, value) for i, rec in enumerate(recs) for key, value in rec.items()
                   if type(value) is float]
        for i, key, value in doubles:
            target = out[i]
            if target is None:
                continue
            kind = recs[i].get("kind")
            written = _double(value, _PLACES.get(kind, _NO_PLACES).get(key))  # type: ignore[arg-type]
            if written is None:
                out[i] = None
            elif written is not value:
                if target is recs[i]:
                    target = out[i] = dict(recs[i])
                target[key] = written
    return out


def _double(value: float, places: int | None) -> float | int | None:
    """A double as the canonical form writes it: rounded to its precision (``places``), an
    integer when whole; None when the one-pass path does not write it (NaN, infinity, whole
    beyond ±(2**53 - 1), or in [1e-6, 1e-5), which orjson writes in exponent form)."""
    if places is not None:
        scale = _SCALES[places]
        # As protocols.canonical._flat_record: already at its precision (the agent rounds what
        # it records) when n / scale gives it back, for |value| < 1e6.
        if not (-1e6 < value < 1e6 and round(value * scale) / scale == value):
            value = round(value, places)
    size = abs(value)
    if not size < math.inf or 1e-6 <= size < 1e-5:
        return None
    if size.is_integer():
        if size > MAX_SAFE_INT:
            return None
        return int(value)
    return value
