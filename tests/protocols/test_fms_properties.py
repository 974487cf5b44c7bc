"""Property tests: no bytes and no frame make the FMS decoder raise; what it emits is valid."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.fms import CanFrame, FmsDecoder, candump, slcan
from protocols.fms.j1939 import make_id
from protocols.fms.messages import DC1, DC2, DI, TCO1, TD, TP_CM, TP_DT, VDHR
from protocols.records import validate
from tests.protocols.fms_vectors import doc_blocks

PGNS = [TCO1, VDHR, TD, DI, DC1, DC2, TP_CM, TP_DT, 0xFEF1, 0xF004]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(records: list[dict[str, Any]]) -> None:
    for record in records:
        validate(record)


@SETTINGS
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_arbitrary_bytes_never_raise(chunks: list[bytes]) -> None:
    decoder = FmsDecoder("ABC1D23")
    for chunk in chunks:
        _check(decoder.feed(chunk))
    _check(decoder.finish())


line_text = st.one_of(
    st.text(alphabet="tTrR0123456789ABCDEFabcdefzZVN\x07 ()#.", max_size=40),
    st.builds(lambda n: doc_blocks()["drive_and_stop"].splitlines()[n % 15], st.integers(0, 14)),
)


@SETTINGS
@given(st.lists(line_text, max_size=40), st.sampled_from([b"\r", b"\n", b"\r\n"]))
def test_arbitrary_text_lines_never_raise(lines: list[str], end: bytes) -> None:
    decoder = FmsDecoder("ABC1D23")
    _check(decoder.feed(end.join(line.encode() for line in lines)))
    _check(decoder.finish())


stamps = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(min_value=0, max_value=100, allow_nan=False))


@st.composite
def frames(draw: st.DrawFn) -> CanFrame:
    if draw(st.booleans()):
        pgn = draw(st.sampled_from(PGNS))
        can_id = make_id(pgn, draw(st.sampled_from([0xEE, 0x21, 0x17])),
                         priority=draw(st.integers(0, 7)),
                         destination=draw(st.sampled_from([0xFF, 0x00])))
        extended = True
    else:
        extended = draw(st.booleans())
        can_id = draw(st.integers(0, 0x1FFF_FFFF if extended else 0x7FF))
    data = draw(st.binary(max_size=draw(st.sampled_from([8, 8, 64]))))
    if draw(st.booleans()) and data[:1]:  # TP frames with plausible control bytes / sequences
        data = bytes([draw(st.sampled_from([32, 16, 1, 2, 3, 4]))]) + data[1:]
    return CanFrame(draw(stamps), can_id, extended, data)


@SETTINGS
@given(st.lists(frames(), max_size=60))
def test_arbitrary_frames_never_raise(sequence: list[CanFrame]) -> None:
    decoder = FmsDecoder("ABC1D23")
    for frame in sequence:
        _check(decoder.frame(frame))
    _check(decoder.finish())
    assert decoder.stats.frames == len(sequence)


@SETTINGS
@given(frames())
def test_classic_frames_round_trip_through_candump_and_slcan(frame: CanFrame) -> None:
    if len(frame.data) > 8:
        return
    stamped = CanFrame(12.5, frame.arbitration_id, frame.is_extended_id, frame.data)
    assert candump.parse_line(candump.format_line(stamped)) == stamped
    parsed = slcan.parse_slcan_line(slcan.encode_frame(frame, timestamp_ms=1234).decode()[:-1])
    assert parsed == (CanFrame(None, frame.arbitration_id, frame.is_extended_id, frame.data), 1234)
