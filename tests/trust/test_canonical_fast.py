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


@settings(max_examples=2000, deadline=None)
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
