"""The ingest's fast paths on hostile batches (commit 369a3fe): a payload read by orjson where it
reads what ``json.loads`` reads (protocols/uplink.py ``_loads``), the record's ts read once by
the validation and kept in its row (``checked_ts_ms``), the chain hashes of a batch taken column
by column (collector/intake.py). Oracles: ``json.loads`` itself for the reading; for the ts,
the milliseconds worked out here from the parts the timestamp is written from; for the hashes,
``rfc8785`` and ``hashlib`` over the spec's normalization (tests/trust/test_hostile_canonical.py).
A batch never makes ``prepare`` fall into its catch-all (a whole batch refused for a bug)."""

from __future__ import annotations

import calendar
import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from collector.intake import prepare
from protocols.uplink import PAYLOAD_SCHEMA, Batch, PayloadError, _loads, checked_ts_ms
from tests.collector.helpers import VEHICLES
from tests.trust.test_hostile_canonical import oracle

V1 = VEHICLES[0]
TOPIC = f"frota/v1/{V1}/up"
T0 = 1_772_460_600_000  # 2026-03-02T14:10:00Z

# -- the reading: any JSON text, as json.loads reads or refuses it -------------------------------
_digits = st.text(alphabet="0123456789", min_size=1, max_size=24)
_numbers = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-", "+", "--"]),
    st.one_of(st.just("0"), _digits.map(lambda d: d.lstrip("0") or "0"), _digits),
    st.one_of(st.just(""), _digits.map(lambda d: "." + d), st.just(".")),
    st.one_of(st.just(""), st.builds(lambda e, s, d: e + s + d, st.sampled_from("eE"),
                                     st.sampled_from(["", "+", "-"]), _digits)),
)
_strings = st.lists(st.one_of(
    st.text(max_size=4).map(lambda t: json.dumps(t)[1:-1]),
    st.text(max_size=3).map(lambda t: json.dumps(t, ensure_ascii=False)[1:-1]),
    st.sampled_from(["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\ude00\\ud83d", "\\u0000",
                     "\\/", "\\x", "\\", "\t", "\x7f", "\u2028", "\\U0041", '\\"'])),
    max_size=4).map(lambda parts: '"' + "".join(parts) + '"')
_words = st.sampled_from(["true", "false", "null", "NaN", "Infinity", "-Infinity", "nan", "tru"])
_scalars = _numbers | _strings | _words


def _object(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"


_texts = st.recursive(
    _scalars,
    lambda inner: (st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]")
                   | st.lists(st.tuples(st.sampled_from(['"a"', '"b"', '"seq"', '""',
                                                         '"\\u0061"']) | _strings, inner),
                              max_size=4).map(_object)),
    max_leaves=12,
)
_wrapped = st.tuples(st.sampled_from(["", " ", "\n\t", "\ufeff", "\x0c"]), _texts,
                     st.sampled_from(["", " ", "\r\n", "x", "\x00"]),
                     st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-16-le", "utf-16",
                                      "utf-32-be", "surrogatepass"]))


def _encode(text: str, encoding: str) -> bytes:
    if encoding == "surrogatepass":
        return text.encode("utf-8", "surrogatepass")
    return text.encode(encoding, "surrogatepass")


def _same(a: Any, b: Any) -> bool:
    """The same reading: equal, of the same types all the way down, keys in the same order,
    -0.0 and NaN kept."""
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b)


@settings(max_examples=400, deadline=None)  # 15,000 run once, all equal
@given(_wrapped)
@example(("", '{"a":1,"b":2,"a":3.0}', "", "utf-8"))  # duplicate keys: the last wins, first place
@example(("", "[1e400,-1e400,1e-400,-0,-0.0,-0e0]", "", "utf-8"))
@example(("", "[18446744073709551616,-9223372036854775809,1" + "0" * 30 + ".5]", "", "utf-8"))
@example(("", '["\\ud800","\\ud83d\\ude00"]', "", "utf-8"))
@example(("", '["\ud800"]', "", "surrogatepass"))
@example(("\ufeff", "[1]", "", "utf-8"))
@example(("", "[1]", "", "utf-16"))
@example(("", "[" * 3000 + "]" * 3000, "", "utf-8"))
def test_a_payload_reads_as_json_loads_reads_it(wrapped: tuple[str, str, str, str]) -> None:
    head, text, tail, encoding = wrapped
    try:
        payload = _encode(head + text + tail, encoding)
    except UnicodeEncodeError:
        return
    try:
        expected: Any = json.loads(payload)
    except (ValueError, RecursionError):
        with pytest.raises(PayloadError):
            _loads(payload)
        return
    assert _same(_loads(payload), expected), payload


# -- the ts read once: every accepted form gives the ms of the instant it writes ---------------
_forms = st.builds(
    lambda y, mo, d, h, mi, s, frac, offset, t, z: (y, mo, d, h, mi, s, frac, offset, t, z),
    st.integers(1969, 2101), st.integers(1, 12), st.integers(1, 31), st.integers(0, 23),
    st.integers(0, 59), st.integers(0, 59),
    st.sampled_from(["", ".0", ".5", ".123", ".1239", ".999999", ".000001", ",5"]),
    st.sampled_from([0, 1, -1, 180, -180, 14 * 60 - 1, -(14 * 60 - 1), 30, 23 * 60 + 59]),
    st.sampled_from(["T", "t", " "]), st.sampled_from(["Z", "z", "+00:00", "offset"]),
)


def _expected_ms(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str,
                 offset: int) -> int | None:
    """The instant by hand: the civil time's seconds (calendar.timegm) minus the offset, the
    fraction's first three digits (below the ms truncated); None outside 1970-2100 UTC or not
    a day of the calendar."""
    if d > calendar.monthrange(y, mo)[1]:
        return None
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset * 60
    ms = seconds * 1000 + int((frac[1:] + "000")[:3] if frac else 0)
    return ms if 0 <= ms <= calendar.timegm((2100, 12, 31, 23, 59, 59, 0, 0, 0)) * 1000 + 999 \
        else None


@settings(max_examples=600, deadline=None)  # 15,000 run once, all sound
@given(_forms)
@example((1970, 1, 1, 0, 0, 0, ".000", 0, "T", "Z"))
@example((2100, 12, 31, 23, 59, 59, ".999", 0, "T", "Z"))
@example((2100, 12, 31, 20, 59, 59, ".999", -180, "T", "offset"))
@example((2101, 1, 1, 2, 59, 59, ".999", 180, "T", "offset"))
@example((1969, 12, 31, 21, 0, 0, "", -180, "T", "offset"))
@example((2028, 2, 29, 12, 0, 0, ".5", 0, "T", "Z"))
@example((2026, 2, 29, 12, 0, 0, ".5", 0, "T", "Z"))
def test_the_ts_kept_in_the_row_is_the_instant_written(
        form: tuple[int, int, int, int, int, int, str, int, str, str]) -> None:
    """``checked_ts_ms`` (the row's ts_ms) and the row ``prepare`` makes: the instant the ts
    writes, for every form the validation accepts; a ts it refuses is a reject, not a row."""
    y, mo, d, h, mi, s, frac, offset, t, zone = form
    if zone == "offset":
        sign = "-" if offset < 0 else "+"
        zone = f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    else:
        offset = 0
    ts = f"{y:04d}-{mo:02d}-{d:02d}{t}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}"
    rec = {"vehicle": V1, "ts": ts, "kind": "speed", "agent": "a1", "seq": 1, "kmh": 10}
    want = _expected_ms(y, mo, d, h, mi, s, frac, offset)
    batch = Batch(vehicle=V1, agent="a1", records=[rec], checkpoint=None)
    try:
        got: int | None = checked_ts_ms(batch, rec)
    except PayloadError:
        got = None
    if got is not None:  # every form accepted is the instant it writes
        assert got == want, ts
    elif want is not None:  # refused: only a form RFC 3339 does not have
        assert t == " " or frac == ",5" or zone == "z" or t == "t", ts
    out = prepare(TOPIC, _payload([rec]), lambda: frozenset(VEHICLES), T0)
    assert [row[4] for row in out.rows] == ([] if got is None else [want])


def _payload(records: list[Any]) -> bytes:
    return json.dumps({"schema": PAYLOAD_SCHEMA, "vehicle": V1, "agent": "a1",
                       "records": records}).encode()


# -- a batch of hostile records: rows hashed as the oracle hashes, never the catch-all ----------
_extra_values = st.sampled_from([
    0, -0.0, 1.0, 1e21, 5e-324, 2**53, 2**64 + 1, 10**30, "", "\u2028", "\U0001f600", "\x00",
    "0" * 64, None, True, [1.0, {"prev": "0" * 64}], {"é": -0.0}, float("nan"), 1e-6,
])
_extra_keys = st.sampled_from(["x", 'a"prev', "é", "\U0001f600", "\ufb33", "", "prev2", "raw",
                               "odometer_m", "ignition", "device_seq", "course"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(_extra_keys, _extra_values, max_size=3),
                          st.sampled_from(["speed", "position"]),
                          st.sampled_from([61.0, 61.25, 0.125, -1.0, 61.004, 2.0**53, 1e-6]),
                          st.sampled_from(["2026-03-02T14:10:00.000Z", "2026-03-02T11:10:00-03:00",
                                           "2026-03-02T14:10:00.1239Z"])),
                min_size=1, max_size=6))
def test_a_hostile_batch_is_stored_or_refused_record_by_record(
        fields: list[tuple[dict[str, Any], str, float, str]]) -> None:
    records = []
    for n, (extra, kind, number, ts) in enumerate(fields, start=1):
        rec: dict[str, Any] = {"vehicle": V1, "ts": ts, "kind": kind, "agent": "a1", "seq": n,
                               **extra}
        if kind == "speed":
            rec["kmh"] = number
        else:
            rec.update(lat=-23.5 + number / 1e6, lon=number, kmh=number)
        records.append(rec)
    try:
        payload = _payload(records)
    except ValueError:
        return
    out = prepare(TOPIC, payload, lambda: frozenset(VEHICLES), T0)
    assert not any(r.reason.startswith("unreadable payload") for r in out.rejects)
    stored = {row[2] for row in out.rows}
    for row in out.rows:
        rec = json.loads(row[9])
        want = oracle(rec)
        assert want is not None
        assert row[11] == hashlib.sha256(want).hexdigest()
    refused = sum(1 for r in out.rejects for _ in range(1))
    assert len(stored) == len(out.rows)
    assert stored or refused


@pytest.mark.parametrize("depth", [300, 1000, 1021])
def test_a_record_nested_deep_is_refused_alone(depth: int) -> None:
    """orjson reads up to 1024 levels, deeper than json.dumps and repr can write back: a record
    nested that deep is refused on its own (its batch kept in its ``rejects`` row), and the
    batch's other records are stored — not the whole batch refused by the catch-all."""
    good = {"vehicle": V1, "ts": "2026-03-02T14:10:02.000Z", "kind": "speed", "agent": "a1",
            "seq": 2, "kmh": 10}
    deep = (f'{{"vehicle":"{V1}","ts":"2026-03-02T14:10:01.000Z","kind":"speed","agent":"a1",'
            f'"seq":1,"kmh":10,"deep":{"[" * depth}{"]" * depth}}}')
    payload = (f'{{"schema":{PAYLOAD_SCHEMA},"vehicle":"{V1}","agent":"a1",'
               f'"records":[{deep},{json.dumps(good)}]}}').encode()
    out = prepare(TOPIC, payload, lambda: frozenset(VEHICLES), T0)
    assert [row[2] for row in out.rows] == [2]
    [reject] = out.rejects
    assert (reject.first_seq, reject.last_seq) == (1, 1)
    assert reject.reason.startswith("invalid record")
    assert out.ack is not None
    assert out.ack.stored == [(2, 2)]
    assert [(a, b) for a, b, _ in out.ack.rejected] == [(1, 1)]
