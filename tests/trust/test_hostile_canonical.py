"""Hostile records through the canonical fast paths (protocols/canonical_batch.py ``forms``, the
agent buffer's forms with placeholder holes, agent/buffer_rows.py), checked against an oracle
that shares no code with them: the spec's two normalizations (docs/records.md, "Canonical
form") written here with :mod:`datetime` and ``round``, then the ``rfc8785`` library, then
:mod:`hashlib`. A wrong byte is a wrong hash: each fast path must give the oracle's bytes, or
leave the record to the slow path (``None``), and the slow path must give them too.

Hostile here: keys holding the placeholder's bytes or a ``"prev``/``"seq`` suffix, non-ASCII keys
(sorted by UTF-16 code units: an astral character sorts before U+E000..U+FFFF), escapes and lone
surrogates, -0.0, whole doubles, 1e21, 5e-324, integers around and beyond 2**53 and 2**64,
nested objects, empty strings and keys, timestamps of every accepted form and near the bounds.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from datetime import UTC, datetime
from typing import Any

import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent.buffer_rows import PLACEHOLDER, agent_json, build_rows, insert_rows, prepare, sent_body
from agent.schema import migrate
from protocols.canonical import canonical
from protocols.canonical_batch import forms
from protocols.records import RecordError

AGENT = "6f1c0d8e-3b55-4a1e-9a43-0c2f3f7e9b10"
VEHICLE = "BUS-1"
_PLACES = {("speed", "kmh"): 2, ("position", "lat"): 7, ("position", "lon"): 7,
           ("position", "kmh"): 2, ("position", "course"): 2}  # docs/records.md's table
_MAX_SAFE = 2**53 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _NoFormError(Exception):
    """The record has no canonical form."""


def _oracle_ts(value: Any) -> str:
    if type(value) is not str or not 19 <= len(value) <= 64:
        raise _NoFormError
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
        if dt.tzinfo is None:
            raise _NoFormError
        delta = dt - _EPOCH
    except (ValueError, OverflowError) as err:
        raise _NoFormError from err
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if not 0 <= ms <= 4_133_980_799_999:  # 1970-01-01 .. 2100-12-31T23:59:59.999Z
        raise _NoFormError
    utc = _EPOCH + (dt - _EPOCH)
    return utc.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _big_as_double(value: Any) -> Any:
    """RFC 8785 §3.2.2.3 (I-JSON), as docs/records.md says: an integer beyond ±(2**53 - 1) is
    the double nearest it."""
    if type(value) is int and abs(value) > _MAX_SAFE:
        try:
            return float(value)
        except OverflowError as err:
            raise _NoFormError from err
    if type(value) is list:
        return [_big_as_double(v) for v in value]
    if type(value) is dict:
        return {k: _big_as_double(v) for k, v in value.items()}
    return value


def oracle(rec: dict[str, Any]) -> bytes | None:
    """The canonical bytes by the spec (None: no canonical form)."""
    out = dict(rec)
    try:
        for key in ("ts", "scheduled", "incident_ts"):
            if out.get(key) is not None:
                out[key] = _oracle_ts(out[key])
        for (kind, key), places in _PLACES.items():
            value = out.get(key)
            if out.get("kind") == kind and (type(value) is int or type(value) is float):
                out[key] = round(value, places)
        return rfc8785.dumps(_big_as_double(out))
    except (_NoFormError, rfc8785.CanonicalizationError, UnicodeEncodeError, OverflowError):
        return None


def _canonical_or_none(rec: dict[str, Any]) -> bytes | None:
    try:
        return canonical(rec)
    except RecordError:
        return None


_T = "2026-03-02T14:00:01.000Z"
_hostile_keys = st.sampled_from([
    "prev", "seq", "agent", 'a"prev', 'x\\"prev', '"prev', 'a"seq', "seq\"", "prev\\", "",
    "kind\"", "é", "€", "\U0001f600", "\ufb33", "\r", "1", "\x00", "\u2028", "\ud800", "kmh",
    "lat", "lon", "course", "ts", "scheduled", "incident_ts", "z" * 40, '"prev":"' + PLACEHOLDER,
])
_hostile_values = st.sampled_from([
    PLACEHOLDER, '"prev":"' + PLACEHOLDER + '"', "0" * 63, "0" * 65, "", "\\", '"', "\u2028",
    "\ud800", "\udfff\ud800", "\U0001f600", "\x7f", "\x1f", "é",
    -0.0, 0.0, 1.0, 80.0, 1e21, 1e-7, 5e-6, 1e-6, 1e-5, 5e-324, 1.7976931348623157e308,
    float("nan"), float("inf"), 2.0**53, 2.0**53 + 2, 9007199254740991.0, 1e16, 123456.789,
    0.005, 0.015, 2.675, -23.55000005, 180.00000005, 359.995,
    _MAX_SAFE, _MAX_SAFE + 1, -_MAX_SAFE - 1, 2**63, 2**64, 2**64 + 1, 10**400, True, False, None,
    _T, "2026-03-02T11:00:01.5-03:00", "2026-02-29T14:00:01.000Z", "2028-02-29T14:00:01.000Z",
    "2026-03-02T14:00:60.000Z", "1970-01-01T00:00:00.000Z", "1969-12-31T23:59:59.999Z",
    "2100-12-31T23:59:59.999Z", "2101-01-01T00:00:00.000Z", "2100-12-31T21:00:00.000-03:00",
    "1970-01-01T00:00:00.000+00:01", "2026-03-02T14:00:01.999999Z", "2026-03-02t14:00:01.000z",
    "２０２６-03-02T14:00:01.000Z", "2026-03-02T14:00:01.000Z\n", "2026-03-02 14:00:01.000Z",
    [], [1.0, -0.0], {"prev": PLACEHOLDER}, {"seq": 0, "é": 1.0}, {}, [{"a": [None]}],
])
_values = (_hostile_values | st.text(max_size=6) | st.floats()
           | st.integers(min_value=-(2**65), max_value=2**65))
_keys = _hostile_keys | st.text(max_size=4)
_records = st.builds(
    lambda kind, rest: {**rest, "kind": kind},
    st.sampled_from(["speed", "position", "door", "x", 3, None]),
    st.dictionaries(_keys, _values, max_size=7),
)


@settings(max_examples=300, deadline=None)  # 6,000 run once, all equal
@given(st.lists(_records, min_size=1, max_size=6))
@example([{"kind": "speed", 'a"prev': PLACEHOLDER, "prev": PLACEHOLDER, "seq": 0}])
@example([{"kind": "position", "lat": -0.0, "lon": 1e21, "kmh": 5e-324, "course": 80.0,
           "ts": "2100-12-31T23:59:59.999Z"}, {"kind": "position", "lat": 1.0, "lon": 2.0}])
@example([{"kind": "x", "\U0001f600": 1, "\ufb33": 2, "€": 3}])
def test_batch_forms_are_rfc8785_of_the_normalized_record(recs: list[dict[str, Any]]) -> None:
    """``forms`` gives the oracle's bytes or None; ``canonical`` (which takes the Nones) gives
    the oracle's bytes, or refuses exactly the records the oracle finds no form for."""
    got = forms(recs)
    for rec, form in zip(recs, got, strict=True):
        want = oracle(rec)
        if form is not None:
            assert form == want, rec
        assert _canonical_or_none(rec) == want, rec


def _commit(recs: list[dict[str, Any]], seq: int, prev: str
            ) -> tuple[list[str], list[int], str]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    conn.execute("INSERT INTO meta VALUES ('agent', ?)", (AGENT,))
    rows, last = build_rows(conn, AGENT, [("gps", prepare(r, AGENT)) for r in recs], seq, prev, 0)
    insert_rows(conn, rows, 0)
    view = dict(conn.execute("SELECT seq, body FROM record_bodies").fetchall())
    stored = conn.execute("SELECT seq, kind, body, prev FROM records ORDER BY seq").fetchall()
    assert [s for s, *_ in stored] == [row[0] for row in rows]
    sent = [sent_body(s, kind, body, prev, agent_json(AGENT)) for s, kind, body, prev in stored]
    assert sent == [view[s] for s, *_ in stored]  # the SQL view writes the same bodies
    conn.close()
    return sent, [row[1] for row in rows], last


@settings(max_examples=200, deadline=None)  # 4,000 run once, all equal
@given(st.lists(st.tuples(st.dictionaries(_keys, _values, max_size=6),
                          st.sampled_from(["speed", "position", "door"]),
                          st.sampled_from([_T, "2026-03-02T11:00:01.5-03:00",
                                           "2100-12-31T23:59:59.999Z"])),
                min_size=1, max_size=5),
       st.sampled_from([1, 7, _MAX_SAFE - 1, 10**6]))
@example([({'a"prev': PLACEHOLDER}, "speed", _T), ({"kmh": 1.0}, "speed", _T)], 7)
@example([({'x\\"prev': PLACEHOLDER, "b": [PLACEHOLDER]}, "speed", _T),
          ({"n": {"prev": PLACEHOLDER}}, "door", _T), ({}, "speed", _T)], 1)
@example([({'"prev":"' + PLACEHOLDER: PLACEHOLDER}, "speed", _T)] * 3, 1)
@example([({"v": 10**400}, "speed", _T), ({"kmh": 2.0**53 + 2}, "speed", _T), ({}, "door", _T)],
         1)
def test_the_buffer_chain_verifies_by_the_oracle(
    fields: list[tuple[dict[str, Any], str, str]], seq: int
) -> None:
    """Each record as the buffer sends it reads back as the record captured plus agent, seq and
    prev; its prev is the SHA-256 of the oracle's canonical bytes of the one before (the first:
    the commit's prev); the commit's last hash is the last record's. A record with no
    canonical form is dropped and takes no seq."""
    recs = [{"vehicle": VEHICLE, "ts": ts, "kind": kind,
             **{k: v for k, v in extra.items()
                if k not in ("vehicle", "ts", "kind", "agent", "seq", "prev")}}
            for extra, kind, ts in fields]
    prev = hashlib.sha256(str(seq).encode()).hexdigest()
    sent, times, last = _commit(recs, seq, prev)
    # dropped: a record with no canonical form, and (as before today's fast paths: the buffer
    # writes JSON with orjson) one holding an integer beyond 64 bits
    kept = [rec for rec in recs if oracle({**rec, "agent": AGENT, "seq": 1, "prev": prev})
            is not None and not _beyond_64_bits(rec)]
    assert len(sent) == len(kept)
    for n, (body, rec) in enumerate(zip(sent, kept, strict=True)):
        # the row's ts_ms: the instant of its ts (the buffer's queries and exports go by it)
        instant = datetime.fromisoformat(_oracle_ts(rec["ts"]).replace("Z", "+00:00"))
        assert times[n] == round((instant - _EPOCH).total_seconds() * 1000)
        got = json.loads(body)
        assert _same(got, {**rec, "agent": AGENT, "seq": seq + n, "prev": prev})
        want = oracle(got)
        assert want is not None
        prev = hashlib.sha256(want).hexdigest()
    assert last == prev


def _beyond_64_bits(value: Any) -> bool:
    if type(value) is int:
        return not -(2**63) <= value <= 2**64 - 1
    if type(value) is dict:
        return any(map(_beyond_64_bits, value.values()))
    if type(value) is list:
        return any(map(_beyond_64_bits, value))
    return False


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types, -0.0 kept (key order aside)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b)
