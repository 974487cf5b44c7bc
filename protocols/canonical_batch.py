"""The canonical form of many flat records at once: the checks of the one-pass path done per
batch, for the collector's ingest (``collector/intake.py``). (Written for the agent's buffer,
issue 16, and not kept there: on the agent's commits it cost more CPU than the one-pass path
record by record, firmware-notes/agent.md.)

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
    keys = set(chain.from_iterable(recs))
    try:
        if not "".join(keys).isascii():
            return [None] * len(recs)
    except TypeError:  # a key that is not a string
        return [None] * len(recs)
    types = set(map(type, chain.from_iterable(rec.values() for rec in recs)))
    if not types <= _FLAT_TYPES:
        return [None] * len(recs)
    out: list[dict[str, Any] | None] = list(recs)
    for key in TIMESTAMP_FIELDS:
        if key not in keys:
            continue
        for i, value in enumerate([rec.get(key) for rec in recs]):
            if value is not None and (type(value) is not str or _canonical_ts_ms(value) is None):
                out[i] = None  # another offset or fraction, or not a time: canonical() decides
    if float in types:
        places_of = [_PLACES.get(rec.get("kind"), _NO_PLACES)  # type: ignore[arg-type]
                     for rec in recs]
        doubles = [(i, key, value) for i, rec in enumerate(recs) for key, value in rec.items()
                   if type(value) is float]
        for i, key, value in doubles:
            target = out[i]
            if target is None:
                continue
            # As protocols.canonical._flat_record: a double at its precision is kept (the agent
            # rounds what it records); else rounded; whole, it is written as the integer.
            written: float | int = value
            places = places_of[i].get(key)
            if places is not None:
                scale = _SCALES[places]
                if not (-1e6 < value < 1e6 and round(value * scale) / scale == value):
                    written = round(value, places)
            size = abs(written)
            if not size < math.inf or 1e-6 <= size < 1e-5:
                out[i] = None
                continue
            if size.is_integer():
                if size > MAX_SAFE_INT:
                    out[i] = None
                    continue
                written = int(written)
            if written is not value:
                if target is recs[i]:
                    target = out[i] = dict(recs[i])
                target[key] = written
    return out
