"""The FMS messages and decoder: the note's hand-worked vectors, decoded and re-encoded."""

from __future__ import annotations

from typing import Any

import pytest

from protocols import fms
from protocols.fms import (
    CanFrame,
    FmsDecoder,
    Tco1,
    candump,
    encode_dc1,
    encode_dc2,
    encode_di,
    encode_tco1,
    encode_td,
    encode_vdhr,
    make_id,
    parse_id,
    pgn_of,
    slcan,
)
from protocols.fms.messages import BY_PGN, decode_signals
from protocols.records import ms_to_ts
from tests.protocols.fms_vectors import (
    DRIVE_AND_STOP,
    DRIVER1,
    DRIVER2,
    ODOMETER,
    SIGNALS,
    TD_MS,
    decode,
    doc_blocks,
    doc_frames,
)


def _subset(record: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key) for key in expected}


def _block(name: str) -> bytes:
    return doc_blocks()[name].encode()


# --- J1939 identifiers (note §1) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("can_id", "priority", "pf", "ps", "sa", "pgn"),
    [
        (0x0CFE6CEE, 3, 0xFE, 0x6C, 0xEE, 65132),  # TCO1, PDU2
        (0x18FEE6EE, 6, 0xFE, 0xE6, 0xEE, 65254),  # TD
        (0x1CECFFEE, 7, 0xEC, 0xFF, 0xEE, 60416),  # TP.CM, PDU1 to global
        (0x1CEBFFEE, 7, 0xEB, 0xFF, 0xEE, 60160),  # TP.DT
        (0x18EA0017, 6, 0xEA, 0x00, 0x17, 59904),  # request PGN, PDU1 to address 0
        (0x0CF00400, 3, 0xF0, 0x04, 0x00, 61444),  # EEC1: PF 240 is the first PDU2
    ],
)
def test_j1939_identifier_fields(can_id: int, priority: int, pf: int, ps: int, sa: int,
                                 pgn: int) -> None:
    ident = parse_id(can_id)
    assert (ident.priority, ident.data_page, ident.pdu_format, ident.pdu_specific,
            ident.source_address) == (priority, 0, pf, ps, sa)
    assert ident.pgn == pgn == pgn_of(can_id)
    assert ident.can_id == can_id
    assert ident.destination == (ps if pf < 240 else 0xFF)
    assert make_id(pgn, sa, priority=priority, destination=ident.destination) == can_id


def test_data_page_is_part_of_the_pgn() -> None:
    ident = parse_id(0x19FEE6EE)  # DP 1
    assert ident.data_page == 1
    assert ident.pgn == 0x1FEE6 == pgn_of(0x19FEE6EE)


@pytest.mark.parametrize("bad", [-1, 0x2000_0000])
def test_identifier_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match="29-bit"):
        parse_id(bad)


def test_make_id_refuses_a_pdu1_pgn_with_a_low_byte() -> None:
    with pytest.raises(ValueError, match="PDU1"):
        make_id(0xEC01, 0xEE)


# --- each message of the note: decoded and re-encoded ------------------------------------------


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_vector_signals(name: str) -> None:
    ((_, can_id, data),) = doc_frames(name)
    expected_id, codes = SIGNALS[name]
    assert can_id == expected_id
    assert decode_signals(pgn_of(can_id), data) == codes


def test_vectors_reencode_from_values() -> None:
    """The encoders the simulator uses rebuild the note's frames from the values it names."""
    tco1 = Tco1(**SIGNALS["tco1_drive"][1])
    assert tco1 == Tco1(Driver1WorkingState=3, Driver2WorkingState=1, VehicleMotion=1,
                        Driver1Card=1, Driver2Card=1, OutputShaftSpeed=1800 * 8,
                        TachographVehicleSpeed=fms.speed_code(87.5))
    built = {
        "tco1_drive": encode_tco1(tco1),
        "vdhr": encode_vdhr(ODOMETER),
        "td": encode_td(TD_MS, local_offset_min=-180),
        "dc2": encode_dc2(True, False),
        "dc1": encode_dc1(0),
    }
    for name, frame in built.items():
        ((_, can_id, data),) = doc_frames(name)
        assert (frame.arbitration_id, frame.is_extended_id, frame.data) == (can_id, True, data), name


def test_di_bam_reencodes() -> None:
    frames = encode_di(DRIVER1, DRIVER2)
    assert [(f.arbitration_id, f.data) for f in frames] == [
        (can_id, data) for _, can_id, data in doc_frames("di_bam")
    ]


def test_short_di_is_one_frame() -> None:
    (frame,) = encode_di("A1", None)
    assert frame.arbitration_id == 0x18FE6BEE
    assert frame.data == b"A1**\xff\xff\xff\xff"


def test_dbc_describes_every_message_of_the_note() -> None:
    assert {m.name for m in BY_PGN.values()} == {"TCO1", "VDHR", "TD", "CCVS1", "DC1", "DC2"}
    assert {hex(p) for p in BY_PGN} == {"0xfe6c", "0xfec1", "0xfee6", "0xfef1", "0xfe4e", "0xfda5"}


# --- the note's records --------------------------------------------------------------------------


def test_tco1_vector_before_td() -> None:
    records, _ = decode(_block("tco1_drive") + b"\n" + _block("td"))
    # TCO1 received 80 ms before TD (its receive stamp .020 vs .100): held, dated backwards.
    assert [_subset(r, e) for r, e in zip(records, DRIVE_AND_STOP[:3], strict=True)] == (
        [{**e, "odometer_m": None} if e["kind"] == "speed" else e for e in DRIVE_AND_STOP[:3]]
    )
    assert records[0]["raw"] == "0cfe6cee4b10d00040388057"


def test_a_receive_clock_going_back_never_dates_before_the_latest_td() -> None:
    records, _ = decode(_block("td") + b"\n" + _block("tco1_drive"))
    assert records[0]["ts"] == ms_to_ts(TD_MS)


def test_td_vector_is_the_documented_time() -> None:
    assert ms_to_ts(TD_MS) == "2026-03-02T14:05:30.750Z"
    records, decoder = decode(_block("td") + b"\n")
    assert records == []
    assert decoder.clock.anchor_ms == TD_MS


def test_drive_and_stop_gives_the_documented_records() -> None:
    records, decoder = decode(_block("drive_and_stop"))
    assert [_subset(r, e) for r, e in zip(records, DRIVE_AND_STOP, strict=True)] == DRIVE_AND_STOP
    summary = decoder.stats.summary()
    assert summary["frames"] == 15
    assert summary["sampled_out"] == 1
    assert summary["skipped"] == 2  # DC1 after DC2, CCVS1
    assert summary["foreign"] == 1  # EEC1
    assert summary["bam_complete"] == 1
    assert summary["malformed"] == summary["undated"] == summary["bytes_dropped"] == 0
    di_raw = "".join(f"{can_id:08x}{data.hex()}" for _, can_id, data in doc_frames("di_bam"))
    assert records[3]["raw"] == records[4]["raw"] == di_raw


@pytest.mark.parametrize("size", [1, 7, 50, 4096])
def test_drive_and_stop_in_any_read_size(size: int) -> None:
    data = _block("drive_and_stop")
    records, _ = decode(*(data[i : i + size] for i in range(0, len(data), size)))
    assert [_subset(r, e) for r, e in zip(records, DRIVE_AND_STOP, strict=True)] == DRIVE_AND_STOP


def test_drive_and_stop_as_slcan_text() -> None:
    """The same frames as an adapter sends them (time stamps on) decode to the same records."""
    lines = b""
    for rx, can_id, data in doc_frames("drive_and_stop"):
        stamp = round((rx - 1_699_999_990) * 1000)  # adapter counter: 10 s in, no wrap
        lines += slcan.encode_frame(CanFrame(None, can_id, True, data), timestamp_ms=stamp)
    records, _ = decode(lines)
    assert [_subset(r, e) for r, e in zip(records, DRIVE_AND_STOP, strict=True)] == DRIVE_AND_STOP


def test_drive_and_stop_as_python_can_style_frames() -> None:
    decoder = FmsDecoder("ABC1D23")
    records = []
    for rx, can_id, data in doc_frames("drive_and_stop"):
        records += decoder.frame(CanFrame(rx, can_id, True, data))
    assert [_subset(r, e) for r, e in zip(records, DRIVE_AND_STOP, strict=True)] == DRIVE_AND_STOP


def test_candump_lines_round_trip() -> None:
    for line in doc_blocks()["drive_and_stop"].splitlines():
        frame = candump.parse_line(line)
        assert frame is not None
        assert candump.format_line(frame) == line
