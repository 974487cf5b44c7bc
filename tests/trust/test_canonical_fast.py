"""The canonical form's fast path (orjson) writes exactly what ``rfc8785`` writes."""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocols.canonical import _fast, jcs
from protocols.records import RecordError

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=1e-5, max_value=1e17)
    | st.text(max_size=12)
    | st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
)
_keys = st.text(max_size=8) | st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1,
                                      max_size=10)


def _reference(obj: dict[str, object]) -> bytes | None:
    try:
        return rfc8785.dumps(obj)  # type: ignore[arg-type]
    except (rfc8785.CanonicalizationError, UnicodeEncodeError, OverflowError):
        return None


@settings(max_examples=500, deadline=None)  # profiled: the time is hypothesis drawing examples
@given(st.dictionaries(_keys, _scalars, max_size=12))
@example({"kmh": 61.0, "lat": -23.5163, "lon": -46.6252, "x": 1e-4, "y": 9999999999999998.0})
@example({"a": 0.1, "b": 1e-7, "c": 1e21, "d": -0.0, "e": 123456789012345.6, "f": 2**53 - 1})
@example({"z": "ação", "é": 1, "a\u2028": "\u2028", "q": 'say "hi"', "t": "tab\t"})
def test_the_direct_path_is_rfc8785(obj: dict[str, object]) -> None:
    fast = _fast(obj)
    expected = _reference(obj)
    if fast is not None:
        assert fast == expected
    try:
        got: bytes | None = jcs(obj)
    except RecordError:
        got = None
    if expected is not None:
        assert got == expected


def test_a_record_goes_the_direct_way() -> None:
    rec = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:00:01.000Z", "kind": "speed", "agent": "a1",
           "seq": 1, "prev": "0" * 64, "kmh": 61.5, "odometer_m": 22, "ignition": True,
           "device_seq": 1, "raw": "aa5529"}
    assert _fast(rec) == rfc8785.dumps(rec)  # type: ignore[arg-type]
    with pytest.raises(RecordError):
        jcs({"x": float("nan")})


_record_values = (
    _scalars
    | st.sampled_from(["2026-03-02T14:00:01.000Z", "2026-03-02T11:00:01-03:00",
                       "2026-02-30T14:00:01.000Z", "1969-12-31T23:59:59.999Z",
                       "2026-03-02T14:00:01.123456Z", "2026-03-02t14:00:01.000z"])
    | st.floats(min_value=-500, max_value=500)
    # values already at a documented precision (what the agent records): 7 and 2 decimals
    | st.integers(-(10**10), 10**10).map(lambda n: n / 10**7)
    | st.integers(-(10**6), 10**6).map(lambda n: n / 100)
    | st.lists(st.integers(), max_size=2)
)
_record_keys = _keys | st.sampled_from(["ts", "scheduled", "incident_ts", "kmh", "lat", "lon",
                                        "course", "kind"])


@settings(max_examples=750, deadline=None)  # (as above; 4x fewer than before)
@given(st.sampled_from(["speed", "position", "door", None, 3]),
       st.dictionaries(_record_keys, _record_values, max_size=10))
@example("position", {"lat": -23.51234565, "lon": -46.6252, "kmh": 74.085, "course": 90.0,
                      "ts": "2026-03-02T14:00:01.000Z"})
@example("speed", {"kmh": 1e-6 + 61.0 - 61.0, "ts": "2026-03-02T11:00:01.5-03:00"})
@example("position", {"lat": -23.5123457, "lon": -46.62, "kmh": 74.08, "course": 0.07,
                      "ts": "2026-03-02T14:00:01.000Z"})
def test_the_one_pass_record_path_is_the_two_step_path(kind: object,
                                                       rec: dict[str, object]) -> None:
    """canonical()'s one pass over a flat record gives exactly jcs(normalized(rec)), and refuses
    what that refuses."""
    from protocols.canonical import _flat_record, canonical, normalized

    rec = {**rec, "kind": kind}
    try:
        expected: bytes | None = jcs(normalized(rec))
    except RecordError:
        expected = None
    fast = _flat_record(rec)
    if fast is not None:
        assert fast == expected
    try:
        got: bytes | None = canonical(rec)
    except RecordError:
        got = None
    assert got == expected


def test_a_record_goes_the_one_pass_way() -> None:
    from protocols.canonical import _flat_record

    rec = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:00:01.000Z", "kind": "speed", "agent": "a1",
           "seq": 1, "prev": "0" * 64, "kmh": 61.5, "odometer_m": 22, "ignition": True,
           "device_seq": 1, "raw": "aa5529"}
    # the worked example of firmware-notes/mqtt.md, by hand: sorted keys, no spaces
    assert _flat_record(rec) == (
        b'{"agent":"a1","device_seq":1,"ignition":true,"kind":"speed","kmh":61.5,'
        b'"odometer_m":22,"prev":"' + b"0" * 64 + b'","raw":"aa5529","seq":1,'
        b'"ts":"2026-03-02T14:00:01.000Z","vehicle":"ABC1D23"}')
