"""The registrador decoder and encoder: the note's hand-worked vectors and hex tables of stream cases."""

from __future__ import annotations

from typing import Any

import pytest

from protocols import registry
from protocols.records import ms_to_ts
from protocols.registrador import (
    RegistradorDecoder,
    Slot,
    encode_device_event,
    encode_driver_event,
    encode_history_end,
    encode_history_record,
    encode_history_request,
    encode_incident,
    encode_status,
    encode_trip,
)
from protocols.registrador.frames import COMPILED, PAYLOADS, STATUS, crc16
from protocols.registrador.scanner import check_frame
from tests.protocols.registrador_vectors import EXPECTED, decode, doc_vectors, frame, seqs

T0 = 1_772_460_000_000  # 2026-03-02T14:00:00.000Z, the note's §9 clock

V = doc_vectors()
S, D, E, C, INC, R, H, HE = (
    V["status"], V["driver_event"], V["device_event"], V["console_trip"],
    V["console_incident"], V["history_request"], V["history_record"], V["history_end"],
)


def _subset(record: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key) for key in expected}


# --- the note's vectors ----------------------------------------------------------------------------


def test_crc_is_ibm_3740() -> None:
    assert crc16(b"123456789") == 0x29B1


def test_the_note_has_a_vector_for_every_frame_type() -> None:
    assert sorted(V) == sorted(EXPECTED)
    assert {v[3] for v in V.values()} == {0x01, 0x02, 0x03, 0x04, 0x50, 0x51, 0x52}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_vector_decodes_to_the_documented_records(name: str) -> None:
    records, decoder = decode(V[name])
    assert [_subset(r, e) for r, e in zip(records, EXPECTED[name], strict=True)] == EXPECTED[name]
    inner = S if name == "history_record" else V[name]
    assert all(r["raw"] == inner.hex() for r in records)
    assert decoder.stats.bytes_dropped == 0
    assert decoder.stats.crc_failures == 0
    assert decoder.stats.frames == 1


def test_encoder_reproduces_every_vector_byte_for_byte() -> None:
    assert encode_status(
        256, T0, kmh=87.5, odometer_m=123456, ignition=True,
        slot1=Slot("04512345678", "drive"), slot2=Slot("04598765432", "available"),
    ) == S
    assert encode_driver_event(
        257, T0 + 1500, slot=1, event="card_in", state=Slot("04512345678", "work")
    ) == D
    assert encode_device_event(258, T0 + 2000, event="clock_set", value=T0 - 10_000) == E
    assert encode_trip(
        259, T0 + 3000, event="start", trip="T-0001", line="SP-0401", scheduled_ms=T0 + 1_800_000
    ) == C
    assert encode_incident(260, T0 + 4000, cause="accident", carrier_fault=False) == INC
    assert encode_history_request(256, 258, request_id=7) == R
    assert encode_history_record(7, T0 + 5000, S) == H
    assert encode_history_end(7, T0 + 5000, first=256, last=258, sent=3, oldest=1) == HE


def test_history_end_is_reported_to_the_agent() -> None:
    _, decoder = decode(HE)
    (end,) = decoder.history_ends
    assert (end.request_id, end.first, end.last, end.sent, end.oldest) == (7, 256, 258, 3, 1)
    assert end.clock_ms == T0 + 5000
    assert decoder.last_clock_ms == T0 + 5000


def test_history_request_seen_on_the_wire_is_skipped_not_an_error() -> None:
    records, decoder = decode(R, D)
    assert seqs(records) == [257]
    assert decoder.stats.skipped == 1
    assert decoder.stats.bytes_dropped == 0
    assert decoder.last_clock_ms == T0 + 1500  # the request's CLOCK 0 is not the device's


def test_last_clock_is_the_device_clock_of_the_latest_frame() -> None:
    _, decoder = decode(D, R)
    assert decoder.last_clock_ms == T0 + 1500
    _, decoder = decode(S, H)
    assert decoder.last_clock_ms == T0 + 5000  # the history record's own clock, not frame 256's
    _, decoder = decode(UNKNOWN)
    assert decoder.last_clock_ms is None


def test_fast_layout_and_compiled_construct_agree_on_the_status_vector() -> None:
    parsed = COMPILED[STATUS].parse(S[16:-2])
    plain = PAYLOADS[STATUS].parse(S[16:-2])
    assert parsed.speed == plain.speed == 8750
    assert parsed.slot1.card == "04512345678"
    assert check_frame(S) is not None
    assert check_frame(S[:-1] + b"\x00") is None


def test_registered_under_its_name() -> None:
    assert registry.get("registrador").clocked
    assert isinstance(registry.get("registrador").make_decoder("X"), RegistradorDecoder)


# --- hex tables: the stream ---------------------------------------------------------------------

BAD_CRC = S[:-1] + bytes([S[-1] ^ 0x01])
UNKNOWN = frame(0x7E, 9, T0, bytes.fromhex("010203"))
FALSE_START = bytes.fromhex("aa55 29 02")  # a driver event never has LEN 41

#: name, reads, frame numbers decoded in order, expected counters.
STREAM_CASES: list[tuple[str, list[bytes], list[int], dict[str, int]]] = [
    ("clean status", [S], [256], {"frames": 1, "bytes_dropped": 0}),
    ("clean driver event", [D], [257], {"frames": 1}),
    ("clean device event", [E], [258], {"frames": 1}),
    ("clean trip", [C], [259], {"frames": 1}),
    ("clean incident", [INC], [260], {"frames": 1}),
    ("clean history record", [H], [256], {"frames": 1}),
    ("garbage before", [bytes.fromhex("0013ff5a") + S], [256], {"bytes_dropped": 4}),
    ("a stray AA before the sync", [b"\xaa" + S], [256], {"bytes_dropped": 1}),
    ("garbage in its own read", [b"\x00" * 10, S], [256], {"bytes_dropped": 10}),
    ("bad CRC then a good frame", [BAD_CRC + D], [257],
     {"crc_failures": 1, "bytes_dropped": len(S), "frames": 1}),
    ("two frames in one read", [S + D], [256, 257], {"frames": 2}),
    ("all types in one read", [S + D + E + C + INC + R + H + HE], [256, 257, 258, 259, 260, 256],
     {"frames": 8, "skipped": 1, "bytes_dropped": 0}),
    ("unknown type skipped whole", [UNKNOWN + D], [257],
     {"unknown_types": 1, "bytes_dropped": len(UNKNOWN), "crc_failures": 0}),
    ("known type with a wrong length is a false start", [FALSE_START + D], [257],
     {"bytes_dropped": 4, "crc_failures": 0}),
    ("truncated frame at the end", [D + S[:30]], [257], {"bytes_dropped": 30, "frames": 1}),
    ("false start hiding the last frame", [bytes.fromhex("aa55ff7e") + D], [257],
     {"bytes_dropped": 4}),
    ("sync split across reads", [D + S[:1], S[1:]], [257, 256], {"bytes_dropped": 0}),
    ("history record with a bad outer CRC: the inner frame is found", [H[:-1] + b"\x00"], [256],
     {"crc_failures": 1, "bytes_dropped": 18}),
]


@pytest.mark.parametrize(
    ("reads", "expected_seqs", "counters"),
    [case[1:] for case in STREAM_CASES],
    ids=[case[0] for case in STREAM_CASES],
)
def test_stream(reads: list[bytes], expected_seqs: list[int], counters: dict[str, int]) -> None:
    records, decoder = decode(*reads)
    assert seqs(records) == expected_seqs
    summary = decoder.stats.summary()
    assert {key: summary[key] for key in counters} == counters


def test_a_frame_split_at_every_point_decodes_once() -> None:
    for cut in range(1, len(S)):
        records, decoder = decode(S[:cut], S[cut:])
        assert seqs(records) == [256], cut
        assert decoder.stats.bytes_dropped == 0


def test_every_vector_fed_byte_by_byte() -> None:
    stream = S + D + E + C + INC + H + HE
    records, decoder = decode(*(stream[i : i + 1] for i in range(len(stream))))
    assert seqs(records) == [256, 257, 258, 259, 260, 256]
    assert decoder.stats.bytes_dropped == 0
    assert decoder.stats.frames == 7


def test_rejected_bytes_are_kept() -> None:
    garbage = bytes.fromhex("deadbeef")
    _, decoder = decode(garbage + BAD_CRC + D + UNKNOWN + S[:20])
    reasons = [reason for reason, _ in decoder.stats.rejected]
    kept = "".join(raw for _, raw in decoder.stats.rejected)
    assert reasons[0].startswith("garbage (63 bytes, 1 CRC failures")
    assert kept.startswith(garbage.hex() + BAD_CRC.hex())
    assert "unknown type 0x7e" in reasons
    assert UNKNOWN.hex() in kept
    assert reasons[-1].startswith("truncated or garbage at end of stream (20 bytes)")
    assert S[:20].hex() in kept


# --- frames with a good CRC but bad contents: malformed, never an exception ----------------------


def _status_payload(speed: int = 0, flags: int = 0x03, act1: int = 3, card1: bytes = b"C1") -> bytes:
    slot1 = card1.ljust(16, b"\0") + bytes([act1])
    return speed.to_bytes(2, "big") + (1000).to_bytes(4, "big") + bytes([flags]) + slot1 + bytes(16) + b"\xff"


MALFORMED = [
    ("speed above 400 km/h", frame(0x01, 1, T0, _status_payload(speed=40_001))),
    ("card id not ASCII", frame(0x01, 1, T0, _status_payload(card1=b"\xff\xfe"))),
    ("clock past year 9999", frame(0x01, 1, 2**63, _status_payload())),
    ("driver slot 3", frame(0x02, 1, T0, b"\x03\x01" + b"C1".ljust(16, b"\0") + b"\x02")),
    ("driver event code 9", frame(0x02, 1, T0, b"\x01\x09" + b"C1".ljust(16, b"\0") + b"\x02")),
    ("device event code 99", frame(0x03, 1, T0, b"\x63" + bytes(10))),
    ("console action 9", frame(0x04, 1, T0, b"\x09\x01\x00")),
    ("trip without an id", frame(0x04, 1, T0, b"\x01" + bytes(40))),
    ("incident cause 0", frame(0x04, 1, T0, b"\x03\x00\x00")),
    ("carrier fault byte 7", frame(0x04, 1, T0, b"\x03\x01\x07")),
    ("history record of a frame with a bad CRC", frame(0x51, 7, T0, BAD_CRC)),
    ("history record of a history end", frame(0x51, 7, T0, HE)),
]


@pytest.mark.parametrize("bad", [case[1] for case in MALFORMED], ids=[case[0] for case in MALFORMED])
def test_malformed_frame_is_counted_and_the_next_one_decodes(bad: bytes) -> None:
    records, decoder = decode(bad + D)
    assert seqs(records) == [257]
    assert decoder.stats.malformed == 1
    assert decoder.stats.bytes_dropped == len(bad)
    assert decoder.stats.rejected[-1] == (decoder.stats.rejected[-1][0], bad.hex())
    assert decoder.stats.rejected[-1][0].startswith("malformed: ")


# --- state: changes, flags, history -------------------------------------------------------------

A = Slot("04512345678", "drive")
B = Slot("04598765432", "available")


def _status(seq: int, **kwargs: Any) -> bytes:
    fields: dict[str, Any] = {"kmh": 80.0, "odometer_m": 1000 + seq, "ignition": True,
                              "slot1": A, "slot2": B}
    fields.update(kwargs)
    return encode_status(seq, T0 + seq * 1000, **fields)


def _kinds(records: list[dict[str, Any]]) -> list[tuple[int, str, Any]]:
    keyed = []
    for r in records:
        key = r.get("slot") if r["kind"] == "driver" else r.get("status")
        keyed.append((r["device_seq"], r["kind"], key))
    return keyed


def test_driver_records_only_on_change() -> None:
    records, _ = decode(
        _status(1), _status(2), _status(3, slot1=Slot(A.card, "work")), _status(4, slot1=Slot(A.card, "work")),
        _status(5, slot2=Slot()),
    )
    assert _kinds(records) == [
        (1, "speed", None), (1, "driver", 1), (1, "driver", 2),
        (2, "speed", None),
        (3, "speed", None), (3, "driver", 1),
        (4, "speed", None),
        (5, "speed", None), (5, "driver", 1), (5, "driver", 2),
    ]
    # frame 5: slot 1 back to drive (kwargs reset it), slot 2 emptied: no driver, activity unknown
    assert records[-1]["driver"] is None
    assert records[-1]["activity"] == "unknown"


def test_flags_give_device_records_on_change() -> None:
    records, _ = decode(
        _status(1), _status(2, compartment_open=True), _status(3, compartment_open=True),
        _status(4, tamper=True, fault=True), _status(5, power_interrupted=True),
    )
    device = [(r["device_seq"], r["status"], r.get("detail")) for r in records if r["kind"] == "device"]
    assert device == [
        (2, "compartment_open", None),
        (4, "tamper", None), (4, "fault", None), (4, "ok", "compartment closed"),
        (5, "ok", "tamper cleared; sensor fault cleared"),
        (5, "power_loss", "power interrupted before this frame"),
    ]


def test_a_driver_event_is_not_repeated_by_the_next_status() -> None:
    card_out = encode_driver_event(2, T0 + 2000, slot=2, event="card_out", state=Slot(B.card))
    records, _ = decode(_status(1), card_out, _status(3, slot2=Slot()))
    assert _kinds(records)[3:] == [(2, "driver", 2), (3, "speed", None)]
    assert records[3]["driver"] is None


def test_history_frame_gives_the_records_it_would_have_given_live() -> None:
    live = [_status(1), _status(2, slot1=Slot(A.card, "work")), _status(3, slot1=Slot(A.card, "work"))]
    all_live, _ = decode(*live)
    decoder = RegistradorDecoder("ABC1D23")
    got = decoder.feed(live[0]) + decoder.feed(live[2])
    assert decoder.gaps() == [(2, 2)]
    assert decoder.highest_seq == 3
    # frame 2 lost live: its change is reported at frame 3
    assert _kinds(got)[-2:] == [(3, "speed", None), (3, "driver", 1)]
    history = decoder.feed(encode_history_record(1, T0 + 9000, live[1]))
    assert history == [r for r in all_live if r["device_seq"] == 2]
    assert decoder.gaps() == []
    assert decoder.last_clock_ms == T0 + 9000
    assert decoder.highest_seq == 3
    # the same frame again (history overlapping live) gives the same records again
    assert decoder.feed(encode_history_record(2, T0 + 9500, live[1])) == history


def test_gaps_count_every_frame_received_whatever_its_type() -> None:
    event = encode_device_event(2, T0 + 2000, event="tamper")
    trip = encode_trip(3, T0 + 3000, event="end", trip="T-1", line="L-1")
    bad = frame(0x01, 5, T0 + 5000, _status_payload(speed=50_000))  # malformed, but received
    records, decoder = decode(event, trip, bad, _status(7))
    assert decoder.gaps() == [(4, 4), (6, 6)]
    assert decoder.highest_seq == 7
    assert decoder.stats.malformed == 1
    # no status before them: the first status frame reports both slots
    assert _kinds(records)[-3:] == [(7, "speed", None), (7, "driver", 1), (7, "driver", 2)]


def test_timestamps_are_the_device_clock() -> None:
    records, _ = decode(_status(42))
    assert records[0]["ts"] == ms_to_ts(T0 + 42_000) == "2026-03-02T14:00:42.000Z"


def test_encoder_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="activity"):
        encode_status(1, T0, kmh=0, odometer_m=0, ignition=False, slot1=Slot("X", "sleep"))
    with pytest.raises(ValueError, match="cannot build"):
        encode_status(1, T0, kmh=0, odometer_m=0, ignition=False, slot1=Slot("X" * 17, "rest"))
    with pytest.raises(ValueError, match="history range"):
        encode_history_request(5, 4)
    with pytest.raises(ValueError, match="trip event"):
        encode_trip(1, T0, event="pause", trip="T", line="L")
