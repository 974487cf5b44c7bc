"""The canonical form of a record (docs/records.md, "Canonical form"): RFC 8785 plus the
documented normalizations. Expected bytes come from RFC 8785's own examples or are worked by hand
in the comments, never from running the code."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from protocols.canonical import PRECISION, _big_ints_as_doubles, canonical, jcs, normalized
from protocols.records import ACTIVITIES, MAX_SAFE_INT, RecordError, ms_to_ts, ts_to_ms, validate


def _double(bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


# RFC 8785 appendix B: IEEE 754 bit patterns and their JCS text.
@pytest.mark.parametrize(
    ("bits", "text"),
    [
        ("0000000000000000", "0"),
        ("8000000000000000", "0"),  # minus zero
        ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"),
        ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"),
        ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
)
def test_rfc8785_number_vectors(bits: str, text: str) -> None:
    assert jcs(_double(bits)) == text.encode()


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000"])  # NaN, Infinity
def test_rfc8785_numbers_without_a_form(bits: str) -> None:
    with pytest.raises(RecordError):
        jcs(_double(bits))


def test_rfc8785_section_3_2_2_example() -> None:
    # RFC 8785 §3.2.2: the input as parsed, and the exact output the RFC prints.
    parsed = json.loads(
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    assert jcs(parsed) == expected


def test_rfc8785_section_3_2_3_key_order_is_by_utf16_code_units() -> None:
    # RFC 8785 §3.2.3: U+1F600 (surrogates D83D DE00) sorts before U+FB33 in UTF-16, although
    # its code point is larger.
    obj = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    text = jcs(obj).decode()
    assert text == (
        '{"\\r":2,"1":4,"\u0080":6,"\u00f6":7,"\u20ac":1,"\U0001f600":5,"\ufb33":3}'
    )


def test_a_speed_record_by_hand() -> None:
    rec = {"vehicle": "ABC1D23", "ts": "2026-03-02T11:10:00.5-03:00", "kind": "speed",
           "kmh": 80.004, "odometer_m": 12345, "agent": "a1", "seq": 7}
    # ts: 11:10:00.5 at -03:00 is 14:10:00.500Z; kmh 80.004 at 0.01 is 80.00, a whole double,
    # which JCS writes "80"; keys sorted: agent, kind ("i" < "m"), kmh, odometer_m, seq, ts, vehicle.
    assert canonical(rec) == (
        b'{"agent":"a1","kind":"speed","kmh":80,"odometer_m":12345,"seq":7,'
        b'"ts":"2026-03-02T14:10:00.500Z","vehicle":"ABC1D23"}'
    )
    assert rec["kmh"] == 80.004, "canonical() does not change the record"


def test_a_position_record_by_hand() -> None:
    rec = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:10:00.1239Z", "kind": "position",
           "lat": -23.51634567891, "lon": -46.62520004, "kmh": 0.004, "course": 359.999}
    # ts: the fraction is truncated to .123, not rounded; lat at 1e-7: -23.5163456|7891 rounds
    # to -23.5163457; lon: -46.6252000|04 → -46.6252; kmh 0.004 → 0.00 → "0";
    # course 359.999 at 0.01 → 360.00 → "360".
    assert canonical(rec) == (
        b'{"course":360,"kind":"position","kmh":0,"lat":-23.5163457,"lon":-46.6252,'
        b'"ts":"2026-03-02T14:10:00.123Z","vehicle":"ABC1D23"}'
    )


def test_other_timestamps_nulls_strings_and_unknown_fields_by_hand() -> None:
    trip = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:10:00Z", "kind": "trip", "event": "start",
            "trip": "T-1", "line": "SP-0401", "scheduled": "2026-03-02T11:00:00-03:00",
            "note": "São Paulo\tTietê", "zz": [1.50, {"b": None, "a": 2e-7}]}
    # scheduled → 14:00:00.000Z; the tab is escaped "\t", the accents are raw UTF-8; an unknown
    # field is kept as it is (no precision), its object's keys sorted too; 1.50 → 1.5,
    # 2e-7 → "2e-7" (JCS writes exponents below 1e-6).
    assert canonical(trip) == (
        '{"event":"start","kind":"trip","line":"SP-0401","note":"São Paulo\\tTietê",'
        '"scheduled":"2026-03-02T14:00:00.000Z","trip":"T-1","ts":"2026-03-02T14:10:00.000Z",'
        '"vehicle":"ABC1D23","zz":[1.5,{"a":2e-7,"b":null}]}'
    ).encode()
    driver = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:10:00.000Z", "kind": "driver",
              "slot": 1, "driver": None, "activity": "rest"}
    assert canonical(driver) == (
        b'{"activity":"rest","driver":null,"kind":"driver","slot":1,'
        b'"ts":"2026-03-02T14:10:00.000Z","vehicle":"ABC1D23"}'
    )


@pytest.mark.parametrize(
    "rec",
    [
        {"vehicle": "V", "ts": "yesterday", "kind": "speed", "kmh": 1},
        {"vehicle": "V", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1,
         "seq": 10**400},  # beyond the largest double
        {"vehicle": "V", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": float("nan")},
        {"vehicle": "V", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1,
         "detail": "\ud800"},  # a lone surrogate has no UTF-8 form
        {"vehicle": "V", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1, "x": {1: 2}},
    ],
)
def test_what_has_no_canonical_form_is_a_record_error(rec: dict[str, Any]) -> None:
    with pytest.raises(RecordError):
        canonical(rec)


# --- properties -------------------------------------------------------------------------------

_TS = st.builds(
    lambda ms, offset_min, digits: _with_offset(ms, offset_min, digits),
    st.integers(0, 4_102_444_799_999),  # 1970 .. 2099
    st.integers(-23 * 60 - 59, 23 * 60 + 59),
    st.sampled_from([0, 3, 6]),
)


def _with_offset(ms: int, offset_min: int, digits: int) -> str:
    from datetime import UTC, datetime, timedelta, timezone

    dt = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(timezone(timedelta(minutes=offset_min)))
    return dt.isoformat(timespec={0: "seconds", 3: "milliseconds", 6: "microseconds"}[digits])


_TEXT = st.text(max_size=12)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_COMMON = {"vehicle": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,10}", fullmatch=True),
           "ts": _TS, "agent": st.text(min_size=1, max_size=8),
           "seq": st.integers(1, MAX_SAFE_INT)}
_RECORDS = st.one_of(
    st.fixed_dictionaries({**_COMMON, "kind": st.just("speed"),
                           "kmh": st.floats(0, 400) | st.integers(0, 400)},
                          optional={"odometer_m": st.integers(0, MAX_SAFE_INT),
                                    "ignition": st.booleans(),
                                    "device_seq": st.integers(0, MAX_SAFE_INT),
                                    "extra": _JSON}),
    st.fixed_dictionaries({**_COMMON, "kind": st.just("position"),
                           "lat": st.floats(-90, 90), "lon": st.floats(-180, 180)},
                          optional={"kmh": st.floats(0, 2000), "course": st.floats(0, 360),
                                    "extra": _JSON}),
    st.fixed_dictionaries({**_COMMON, "kind": st.just("driver"), "slot": st.sampled_from([1, 2]),
                           "driver": st.none() | st.text(min_size=1),
                           "activity": st.sampled_from(ACTIVITIES)}),
    st.fixed_dictionaries({**_COMMON, "kind": st.just("trip"),
                           "event": st.sampled_from(["start", "end"]),
                           "trip": st.text(min_size=1), "line": st.text(min_size=1)},
                          optional={"scheduled": _TS}),
)


@given(_RECORDS)
def test_canonical_is_stable_through_a_parse(rec: dict[str, Any]) -> None:
    validate(rec)
    once = canonical(rec)
    assert canonical(json.loads(once)) == once
    assert json.loads(once) == json.loads(jcs(normalized(rec)))


@given(_RECORDS)
def test_canonical_normalizes_what_it_documents(rec: dict[str, Any]) -> None:
    form = json.loads(canonical(rec))
    assert list(form) == sorted(form, key=lambda k: k.encode("utf-16-be"))
    for key in ("ts", "scheduled"):
        if key in form:
            ts = form[key]
            assert ms_to_ts(ts_to_ms(ts)) == ts
    for (kind, key), places in PRECISION.items():
        if form["kind"] == kind and key in form:
            assert form[key] == round(rec[key], places)


def test_integers_beyond_2_to_53_are_the_doubles_json_reads_them_as() -> None:
    # 2**53 as a double is written "9007199254740992" (appendix B); parsed back it is a Python
    # int, which is the same JSON number and must give the same bytes. 2**53 + 1 is no double:
    # JSON.parse reads it as the nearest one, 2**53 (ties to even). 5.404418755851741e+16 is
    # written with its 16 shortest digits and a zero: "54044187558517410".
    assert jcs({"x": 2.0**53}) == jcs({"x": 2**53}) == b'{"x":9007199254740992}'
    assert jcs(2**53 + 1) == b"9007199254740992"
    assert jcs(5.404418755851741e16) == jcs(54044187558517410) == b"54044187558517410"


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text()
    | st.sampled_from([1e-6, 5e-6, 9.999999e-6, 1e-5, 2.0**53, 2.0**53 + 2, 1e16, 1e21, -0.0]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                               max_size=4),
    max_leaves=20,
)


def _library(obj: object) -> bytes | None:
    try:
        return rfc8785.dumps(obj)  # type: ignore[arg-type]
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):
        return None


@given(_ANY_JSON)
def test_the_fast_path_writes_the_librarys_bytes(obj: object) -> None:
    expected = _library(obj)
    if expected is None:  # integers beyond 2**53 are the doubles JSON reads them as
        try:
            expected = _library(_big_ints_as_doubles(obj))
        except OverflowError:
            expected = None
    try:
        got: bytes | None = jcs(obj)
    except RecordError:
        got = None
    assert got == expected
