"""candump and SLCAN text: hex tables of clean, torn, garbage and bad lines (firmware-notes/fms.md §9)."""

from __future__ import annotations

import pytest

from protocols.base import DecoderStats
from protocols.fms import CanFrame, FmsDecoder, candump
from protocols.fms.candump import LineError
from protocols.fms.slcan import LawicelClock, encode_frame, parse_slcan_line
from protocols.fms.text import MAX_LINE, FrameReader
from tests.protocols.fms_vectors import doc_blocks

TCO1 = bytes.fromhex("4B10D00040388057")  # the note's 10.1


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("(1712345678.123456) can0 18FE6CEE#0123456789ABCDEF",
         CanFrame(1712345678.123456, 0x18FE6CEE, True, bytes.fromhex("0123456789ABCDEF"))),
        ("(0.000001) vcan0 123#", CanFrame(0.000001, 0x123, False, b"")),
        ("(1.5) can1 7FF#11", CanFrame(1.5, 0x7FF, False, b"\x11")),
        ("(1712345678.123456) can0 18fe6cee#0a0b R", CanFrame(1712345678.123456, 0x18FE6CEE, True,
                                                               b"\x0a\x0b")),
        ("   ", None),
    ],
)
def test_candump_lines(line: str, expected: CanFrame | None) -> None:
    assert candump.parse_line(line) == expected


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("1712345678.1 can0 18FE6CEE#00", "not '"),
        ("(abc) can0 18FE6CEE#00", "not a number"),
        ("(-1) can0 18FE6CEE#00", "out of range"),
        ("(1.0) can0 18FE6CEE00", "no '#'"),
        ("(1.0) can0 18FE6C#00", "3 or 8"),
        ("(1.0) can0 800#00", "out of range"),
        ("(1.0) can0 3FFFFFFF#00", "out of range"),
        ("(1.0) can0 18FE6CEG#00", "not hex"),
        ("(1.0) can0 18FE6CEE#0", "0-8 bytes"),
        ("(1.0) can0 18FE6CEE#001122334455667788", "0-8 bytes"),
        ("(1.0) can0 18FE6CEE#zz", "not hex"),
        ("(1.0) can0 123#R", "remote"),
        ("(1.0) can0 123##1AABB", "remote or CAN FD"),
        ("(1.0) can0", "not '"),
    ],
)
def test_bad_candump_lines(line: str, why: str) -> None:
    with pytest.raises(LineError, match=why):
        candump.parse_line(line)


@pytest.mark.parametrize(
    ("line", "frame", "stamp"),
    [
        ("T0CFE6CEE84B10D00040388057", CanFrame(None, 0x0CFE6CEE, True, TCO1), None),
        ("T0CFE6CEE84B10D00040388057EA5F", CanFrame(None, 0x0CFE6CEE, True, TCO1), 59999),
        ("t12320102", CanFrame(None, 0x123, False, b"\x01\x02"), None),
        ("t1230", CanFrame(None, 0x123, False, b""), None),
        ("t12300001", CanFrame(None, 0x123, False, b""), 1),
        ("T18fee6ee87b050e030a297d7a", CanFrame(None, 0x18FEE6EE, True,
                                                bytes.fromhex("7b050e030a297d7a")), None),
    ],
)
def test_slcan_lines(line: str, frame: CanFrame, stamp: int | None) -> None:
    assert parse_slcan_line(line) == (frame, stamp)


@pytest.mark.parametrize("line", ["", "z", "Z", "V1013", "v0100", "NA123", "F00", "\x07"])
def test_slcan_adapter_answers_are_not_frames(line: str) -> None:
    assert parse_slcan_line(line) is None


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("X123", "not t, T, r or R"),
        ("T0CFE6CE", "not hex"),
        ("T0CFE6CEG8", "not hex"),
        ("T3FFFFFFF0", "out of range"),
        ("t8000", "out of range"),
        ("T0CFE6CEE9" + "00" * 9, "CAN FD"),
        ("T0CFE6CEE84B10D000403880", "does not match"),
        ("T0CFE6CEE84B10D00040388057EA5", "does not match"),
        ("T0CFE6CEE84B10D0004038805Z", "not hex"),
        ("T0CFE6CEE84B10D00040388057EA60", "below 60000"),
        ("r1232", "remote"),
    ],
)
def test_bad_slcan_lines(line: str, why: str) -> None:
    with pytest.raises(LineError, match=why):
        parse_slcan_line(line)


def test_slcan_encoder() -> None:
    frame = CanFrame(None, 0x0CFE6CEE, True, TCO1)
    assert encode_frame(frame) == b"T0CFE6CEE84B10D00040388057\r"
    assert encode_frame(frame, timestamp_ms=60_001) == b"T0CFE6CEE84B10D000403880570001\r"
    assert encode_frame(CanFrame(None, 0x7FF, False, b"")) == b"t7FF0\r"
    with pytest.raises(ValueError, match="0-8 bytes"):
        encode_frame(CanFrame(None, 0x7FF, False, bytes(9)))
    with pytest.raises(ValueError, match="out of range"):
        encode_frame(CanFrame(None, 0x800, False, b""))


def test_lawicel_clock_unwraps_the_minute() -> None:
    clock = LawicelClock()
    assert [clock.seconds(ms) for ms in (59_000, 59_950, 10, 500, 0)] == [
        59.0, 59.95, 60.01, 60.5, 120.0]


def _reader_frames(*chunks: bytes) -> tuple[list[CanFrame], DecoderStats]:
    stats = DecoderStats()
    reader = FrameReader(stats)
    frames = [f for chunk in chunks for f in reader.feed(chunk)]
    frames += list(reader.finish())
    return frames, stats


def test_reader_mixes_formats_comments_and_line_ends() -> None:
    data = (b"# a comment\n(1.000000) can0 18FEE6EE#7B050E030A297D7A\r\n"
            b"T0CFE6CEE84B10D00040388057\rz\r\r(2.0) can0 123#01")
    frames, stats = _reader_frames(data)
    assert [(f.arbitration_id, f.timestamp) for f in frames] == [
        (0x18FEE6EE, 1.0), (0x0CFE6CEE, None), (0x123, 2.0)]
    assert stats.skipped == 1  # 'z'
    assert stats.malformed == 0


@pytest.mark.parametrize("size", [1, 2, 3, 7, 13])
def test_reader_torn_reads(size: int) -> None:
    data = doc_blocks()["drive_and_stop"].encode()
    whole, _ = _reader_frames(data)
    torn, stats = _reader_frames(*(data[i : i + size] for i in range(0, len(data), size)))
    assert torn == whole
    assert len(whole) == 15
    assert stats.malformed == stats.bytes_dropped == 0


def test_reader_garbage_costs_only_its_line() -> None:
    good = b"(1.0) can0 18FEE6EE#7B050E030A297D7A\n"
    data = good + b"\x00\xff\xfegarbage\n" + b"T0CFE6CEE8XYZ\r" + bytes(range(14, 256)) + b"\n" + good
    frames, stats = _reader_frames(data)
    assert len(frames) == 2
    assert stats.malformed == 3
    assert stats.bytes_dropped == len(data) - 2 * len(good)


def test_reader_overlong_line_is_dropped_to_its_end() -> None:
    good = b"(1.0) can0 18FEE6EE#7B050E030A297D7A\n"
    junk = b"A" * (MAX_LINE + 100)
    frames, stats = _reader_frames(junk[:150], junk[150:] + b"\n" + good)
    assert len(frames) == 1
    assert stats.malformed == 1
    assert stats.bytes_dropped == len(junk) + 1


def test_reader_timestamped_slcan_gets_unwrapped_receive_times() -> None:
    data = b"".join(
        encode_frame(CanFrame(None, 0x18FEE6EE, True, bytes(8)), timestamp_ms=ms)
        for ms in (59_900, 100, 200)
    )
    frames, _ = _reader_frames(data)
    assert [f.timestamp for f in frames] == [59.9, 60.1, 60.2]


def test_decoder_summary_names_the_bad_lines() -> None:
    decoder = FmsDecoder("ABC1D23")
    assert decoder.feed(b"T0CFE6CEE8XYZ\r") == []
    assert decoder.finish() == []
    assert decoder.stats.malformed == 1
    assert decoder.stats.rejected[0][0].startswith("SLCAN")
