"""The canonical form of many flat records at once, for the collector's ingest
(``collector/intake.py``) and the agent's buffer commits (``agent/buffer.py``): the checks of the one-pass path done column by column over a batch,
in C loops (``map``, ``compress``, set and list operations), not record by record in Python.

:func:`protocols.canonical.canonical` checks each record on its own (keys ASCII, values
scalars, timestamps already canonical, each double at its precision) before ``orjson`` writes
it. :func:`forms` does the same checks for a whole batch and gives, for each record, the bytes
``canonical`` gives — or None when the record does not go this way (``canonical`` then decides:
it gives the same bytes by the longer road, or RecordError):

- keys and value types: once over all the records' keys and values;
- timestamps (``ts``, ``scheduled``, ``incident_ts``): the batch's values of a field checked
  against the canonical shape in one regular-expression match, and each distinct minute once;
- doubles: the values of each field that holds one, checked together — finite, already at
  their precision (``round(v × 10ᵖ) / 10ᵖ == v`` below 10⁶, as the one-pass path checks), not
  in [10⁻⁶, 10⁻⁵) (``orjson`` writes those otherwise than RFC 8785) — and only a column that
  fails a check is looked at value by value. A whole double is written as the integer it
  equals: the records hold that integer (set in C, ``dict.__setitem__`` mapped over them) only
  while ``orjson`` writes them, and get their own double back before :func:`forms` returns
  (the records are never left changed, whatever happens).

``orjson`` may still refuse a record (an integer beyond ±(2**53 - 1), a lone surrogate): that
record too is :func:`canonical`'s. ``tests/trust/test_canonical_batch.py`` checks the bytes
against ``jcs(normalized(rec))`` record by record. The agent's buffer uses it too, for all the
records of one commit at once (``agent/buffer.py``, firmware-notes/agent.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from itertools import chain, compress, repeat
from operator import eq, is_, is_not, ne
from typing import Any, Final

import orjson

from protocols.canonical import _FLAT_TYPES, _SCALES, PRECISION, TIMESTAMP_FIELDS
from protocols.fields import _canonical_ts_ms
from protocols.records import MAX_SAFE_INT

#: orjson's options for a ready record: keys sorted, integers beyond ±(2**53 - 1) refused.
OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER

#: kind → {field: decimal places} and field → {kind: decimal places}
#: (:data:`protocols.canonical.PRECISION` both ways).
_PLACES_BY_KIND: Final[dict[str, dict[str, int]]] = {}
_PLACES_BY_FIELD: Final[dict[str, dict[str, int]]] = {}
for (_k, _f), _p in PRECISION.items():
    _PLACES_BY_KIND.setdefault(_k, {})[_f] = _p
    _PLACES_BY_FIELD.setdefault(_f, {})[_k] = _p

#: Timestamps in the canonical form ``YYYY-MM-DDTHH:MM:SS.sssZ``, each followed by a newline:
#: ASCII digits, month 01–12, day 01–31 and not one its month never has (February 29 is left
#: out too, and a batch with one goes value by value: which years have it is not a pattern's),
#: hour 00–23, minute and second 00–59. The year within 1970–2100 is checked on the batch's
#: earliest and latest value.
_TIMES: Final = re.compile(
    r"(?:[0-9]{4}-(?!02-(?:29|3)|(?:0[469]|11)-31)(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z\n)*")
#: places → a decimal point followed by more digits than that.
_TOO_PRECISE: Final = {places: re.compile(rb"\.[0-9]{%d}" % (places + 1))
                       for places in set(PRECISION.values())}
#: What a list of numbers written plainly by orjson is made of.
_PLAIN_NUMBERS: Final = b"0123456789.,-[]"
_DICT: Final = frozenset({dict})
#: Distinct values of a timestamp field a batch checks one by one (more: one pattern match,
#: so that a batch of ten thousand never fills the parser's memo several times over).
_DISTINCT_MAX: Final = 1024

_get = dict.get
_set = dict.__setitem__


def forms(recs: Sequence[Any], known_times: Collection[str] = ()) -> list[bytes | None]:
    """For each record, its canonical bytes (what :func:`protocols.canonical.canonical` gives),
    or None when ``canonical`` must decide. The records are not changed.

    ``known_times``: timestamp fields the caller has already found canonical in every record
    that holds them (:func:`protocols.fields._canonical_ts_ms` not None: the agent's
    ``prepare`` reads each record's ``ts`` that way), not checked again. The bytes are the same
    as without it for such records; a record that breaks the promise gets a form that
    ``canonical`` would not give (so only a caller that made the check may say so)."""
    return [None if text is None else text.encode() for text in texts(recs, known_times)]


def texts(recs: Sequence[Any], known_times: Collection[str] = (),
          rounded: list[int] | None = None) -> list[str | None]:
    """:func:`forms` as text (each form's bytes are its UTF-8), for a caller that keeps the
    text (the collector stores it as the record). ``rounded``, when given, gets the index of
    every record whose form holds a double rounded to its documented precision: there the
    form says another number than the record (everywhere else the same JSON values: a whole
    double is written as the integer it equals, RFC 8785's ``40`` for ``40.0``)."""
    n = len(recs)
    if not n:
        return []
    if not set(map(type, recs)) <= _DICT:
        return [None] * n
    keys = set(chain.from_iterable(recs))
    try:
        if not "".join(keys).isascii():  # every key a string (TypeError otherwise), all ASCII
            return [None] * n
    except TypeError:
        return [None] * n
    value_types = list(map(type, chain.from_iterable(map(dict.values, recs))))
    types = set(value_types)
    if not types <= _FLAT_TYPES:
        return [None] * n  # nested, or not JSON
    left = [False] * n  # records left to canonical()
    for key in TIMESTAMP_FIELDS:
        if key in keys and key not in known_times:
            _times(recs, key, left)
    # (record index, field, integer written, double kept) of the whole doubles
    whole: list[tuple[list[int], str, list[Any], list[float]]] = []
    if float in types:
        _doubles(recs, keys, value_types.count(float), left, whole)
    try:
        for index, key, ints, _ in whole:
            list(map(_set, map(recs.__getitem__, index), repeat(key), ints))
        try:
            # Each form decoded out of orjson's own bytes (a copy): orjson makes its bytes by
            # shrinking a larger buffer, and a batch of those kept alive together cost about
            # 2 µs a record more in the allocator than the copies (issue 16,
            # firmware-notes/agent.md).
            out: list[str | None] = list(map(
                bytes.decode, map(orjson.dumps, recs, repeat(None), repeat(OPTIONS))))
        except orjson.JSONEncodeError:  # an integer beyond ±(2**53 - 1), a lone surrogate
            out = list(map(_dumps, recs))
    finally:
        for index, key, _, doubles in whole:
            list(map(_set, map(recs.__getitem__, index), repeat(key), doubles))
    if True in left:
        for i in compress(range(n), left):
            out[i] = None
    if rounded is not None:
        for index, _, written, doubles in whole:  # written as another number than kept
            differs = list(map(ne, written, doubles))
            if True in differs:
                rounded.extend(compress(index, differs))
    return out


def _dumps(rec: dict[str, Any]) -> str | None:
    try:
        return orjson.dumps(rec, option=OPTIONS).decode()  # copied: see texts
    except orjson.JSONEncodeError:
        return None


def _times(recs: Sequence[dict[str, Any]], key: str, left: list[bool]) -> None:
    """Leave to canonical() the records whose ``key`` is not a canonical timestamp."""
    column: list[Any] = list(map(_get, recs, repeat(key)))
    present = column
    if None in column:  # records without the field: nothing to check there
        present = list(compress(column, map(is_not, column, repeat(None))))
        if not present:
            return
    # Each distinct value once, as canonical() checks it (its ms remembered: the validation,
    # which reads the same ``ts`` the same way, then finds it there). Records of a batch share
    # their seconds (several kinds a second), so this costs less than one regular-expression
    # pass over all the values, ≈ 0.24 µs a record (0.05 on bench.chain's batches).
    distinct = set(present)
    if len(distinct) <= _DISTINCT_MAX:
        try:
            if None not in list(map(_canonical_ts_ms, distinct)):
                return
        except TypeError:  # not a string
            pass
    else:
        try:
            text = "\n".join(present) + "\n"
        except TypeError:  # not a string
            text = ""
        # 24 characters and a newline each (the length says so, the pattern where the
        # newlines are): every value matches the pattern on its own
        if (len(text) == 25 * len(present) and _TIMES.fullmatch(text) is not None
                and min(present)[:4] >= "1970" and max(present)[:4] <= "2100"):
            return
    for i, value in enumerate(column):  # some value is not canonical: which
        if value is not None and (type(value) is not str or _canonical_ts_ms(value) is None):
            left[i] = True  # another offset or fraction, or not a time: canonical() decides


def _doubles(recs: Sequence[dict[str, Any]], keys: set[str], count: int, left: list[bool],
             whole: list[tuple[list[int], str, list[Any], list[float]]]) -> None:
    """Check every double of the batch (``count`` of them): the fields with a documented
    precision kind by kind, then — only if some double is elsewhere — the others."""
    n = len(recs)
    kinds: list[Any] = list(map(_get, recs, repeat("kind")))
    distinct = set(kinds)
    seen = 0
    for kind in distinct:
        fields = _PLACES_BY_KIND.get(kind) if type(kind) is str else None
        if not fields:
            continue
        if len(distinct) == 1:
            index, group = list(range(n)), recs
        else:
            mask = list(map(eq, kinds, repeat(kind)))  # flat values: only a string equals it
            index, group = list(compress(range(n), mask)), list(compress(recs, mask))
        for key, places in fields.items():
            if key in keys:
                seen += _field(recs, key, places, index, group, left, whole)
    if seen == count:
        return
    for key in keys:  # doubles without a precision: in other fields, or of other kinds
        column: list[Any] = list(map(_get, recs, repeat(key)))
        mask = list(map(is_, map(type, column), repeat(float)))
        by_kind = _PLACES_BY_FIELD.get(key)
        if by_kind is not None:  # those of kinds with a precision for it were seen above
            mask = [found and not (type(kind) is str and kind in by_kind)
                    for found, kind in zip(mask, kinds, strict=True)]
        if True in mask:
            _column(recs, key, None, list(compress(range(n), mask)),
                    list(compress(column, mask)), left, whole)


def _field(recs: Sequence[dict[str, Any]], key: str, places: int, index: list[int],
           group: Sequence[dict[str, Any]], left: list[bool],
           whole: list[tuple[list[int], str, list[Any], list[float]]]) -> int:
    """Field ``key`` of the records ``group`` (``index`` in ``recs``), of a kind that keeps it
    at ``places`` decimal places: its doubles checked (:func:`_column`); how many there are.
    The column is written by ``orjson`` once: with nothing but numbers written plainly in it
    (no exponent, ``null``, boolean or string), each double is the one number with a point."""
    column: list[Any] = list(map(_get, group, repeat(key)))
    at = index
    if None in column:  # an optional field some records do not have
        has = list(map(is_not, column, repeat(None)))
        at, column = list(compress(index, has)), list(compress(column, has))
        if not column:
            return 0
    try:
        text = orjson.dumps(column)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits
        text = b"?"
    if not text.translate(None, _PLAIN_NUMBERS):
        doubles = text.count(b".")
        if doubles == len(column):
            _column(recs, key, places, at, column, left, whole, text)
            return doubles
        if not doubles:
            return 0
    mask = list(map(is_, map(type, column), repeat(float)))  # doubles among other values
    values = list(compress(column, mask))
    if values:
        _column(recs, key, places, list(compress(at, mask)), values, left, whole)
    return len(values)


def _column(recs: Sequence[dict[str, Any]], key: str, places: int | None, index: list[int],
            values: list[float], left: list[bool],
            whole: list[tuple[list[int], str, list[Any], list[float]]],
            text: bytes | None = None) -> None:
    """The doubles ``values`` of field ``key`` (records ``index``), of ``places`` decimal
    places (None: no precision): checked together on how ``orjson`` writes them; value by value
    (:func:`_one_by_one`) only if a check fails.

    ``orjson`` writes a double as the shortest decimal that reads back as it (exactly; an
    exponent below 1e-5 and from 1e16 on, ``null`` for NaN and infinity). So with no exponent,
    a double written with at most ``places`` decimals is at its precision — ``round(v, places)``
    is ``v`` (the decimal it is written as is within half a last place of it, far below
    10**-places / 2 in the range without an exponent), as protocols.canonical._flat_record
    finds — and one written with more is not; ``.0`` is written for a whole double, and only
    for one. (``text``: ``values`` as orjson writes them, when the caller has it.)"""
    if text is None:
        text = orjson.dumps(values)
    if b"e" in text or b"n" in text or (
            places is not None and _TOO_PRECISE[places].search(text) is not None):
        _one_by_one(recs, key, places, index, values, left, whole)
        return
    if b".0," not in text and not text.endswith(b".0]"):
        return  # no whole double: orjson writes each as RFC 8785 does
    is_whole = list(map(float.is_integer, values))
    doubles = list(compress(values, is_whole))
    if places is None and max(map(abs, doubles)) > MAX_SAFE_INT:
        _one_by_one(recs, key, places, index, values, left, whole)
        return
    whole.append((list(compress(index, is_whole)), key, list(map(int, doubles)), doubles))


def _one_by_one(recs: Sequence[dict[str, Any]], key: str, places: int | None,
                index: list[int], values: list[float], left: list[bool],
                whole: list[tuple[list[int], str, list[Any], list[float]]]) -> None:
    """:func:`_column` value by value, as protocols.canonical._flat_record does: each double
    rounded to its precision unless already there, left to canonical() if orjson writes it
    otherwise than RFC 8785, written as the integer it equals when whole."""
    changed: list[int] = []
    written_values: list[Any] = []
    kept: list[float] = []
    for i, value in zip(index, values, strict=True):
        written: float | int = value
        if places is not None:
            scale = _SCALES[places]
            if not (-1e6 < value < 1e6 and round(value * scale) / scale == value):
                written = round(value, places)
        size = abs(written)
        if not size < math.inf or 1e-6 <= size < 1e-5:
            left[i] = True
            continue
        if size.is_integer():
            if size > MAX_SAFE_INT:
                left[i] = True
                continue
            written = int(written)
        if written is not value:
            changed.append(i)
            written_values.append(written)
            kept.append(value)
    if changed:
        whole.append((changed, key, written_values, kept))
