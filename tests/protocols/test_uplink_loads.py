"""A payload is read by orjson where it reads what ``json.loads`` reads, and by ``json`` otherwise:
the same values, the same refusals (protocols/uplink.py ``_loads``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocols.uplink import _NOT_READ, PayloadError, _loads, _orjson_loads

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: orjson would read those as doubles
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.text(alphabet="0123456789abcdef", min_size=19, max_size=60)  # a raw frame's hex
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=5),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 is not the same reading)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b) and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


def _reference(text: bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        return type(err)


def _read(text: bytes) -> Any:
    try:
        return _loads(text)
    except PayloadError:
        return "refused"


@settings(max_examples=400, deadline=None)
@given(_values, st.sampled_from([None, 0, 2]))
@example({"seq": 2**64}, None)
@example([18446744073709551616, -9223372036854775809], None)
@example({"raw": "aa5529" + "0" * 40, "n": 12345678901234567890123}, None)
def test_the_same_values_as_json_loads(value: Any, indent: int | None) -> None:
    text = json.dumps(value, indent=indent).encode()  # NaN and Infinity written as json does
    expected = _reference(text)
    assert not isinstance(expected, type), text
    assert _same(_read(text), expected), text


@pytest.mark.parametrize("text", [
    b"[18446744073709551616]",  # beyond 64 bits: json keeps the integer
    b"[-9223372036854775809]",
    b"123456789012345678901",
    b'{"a":\n 123456789012345678901}',
    b"[NaN, Infinity, -Infinity]",
    b'["\\ud800"]',  # a lone surrogate
    b'["\xed\xa0\x80"]',  # one encoded in the bytes
    b"[1.7976931348623159e308]",  # beyond the largest double: json reads infinity
    b"\xef\xbb\xbf[1]",  # a byte-order mark
    "[1]".encode("utf-16"),
])
def test_what_orjson_reads_otherwise_goes_to_json(text: bytes) -> None:
    assert _orjson_loads(text) is _NOT_READ
    assert _same(_read(text), _reference(text))


@pytest.mark.parametrize("text", [b"[1,]", b"[01]", b"{", b"\x00", b'["a\tb"]', b"[1]x"])
def test_what_neither_reads_is_refused(text: bytes) -> None:
    assert _orjson_loads(text) is _NOT_READ
    assert _read(text) == "refused"


def test_a_raw_frame_of_digits_is_read_by_orjson() -> None:
    text = b'{"raw":"aa5529' + b"0" * 40 + b'","seq":1,"lat":-23.5000000000000000001}'
    assert _orjson_loads(text) is not _NOT_READ
    assert _same(_read(text), json.loads(text))
