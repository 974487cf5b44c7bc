"""APC-485: the hand vectors of firmware-notes/apc.md both ways, hex tables, wrap, reset, poller."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import registry
from protocols.apc import (
    ACK_RESET,
    ApcDecoder,
    DoorCounts,
    Poller,
    encode_ack,
    encode_counts,
    encode_request,
)
from protocols.apc.frames import Frame, crc16
from protocols.apc.poller import reply_timeout_s
from protocols.records import Record, ts_to_ms, validate
from tests.services import PROJECT

DATA = PROJECT / "tests" / "data" / "apc"
T0 = ts_to_ms("2026-03-02T14:23:05.000Z")

# (name, frame as laid out field by field in firmware-notes/apc.md, what the encoder is given)
V1 = "a5 01 01 00 c8 9d"
V2 = "a5 01 81 06 00 00 01 02 00 fa be a7"
V3_REQUEST = "a5 02 02 00 c4 9e"
V3_ANSWER = "a5 02 82 00 df 06"
V4 = "a5 03 81 06 0b 02 00 07 00 03 1c 93"
V7 = "a5 04 81 06 04 00 00 10 00 0c 1b a4"


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def decode(*chunks: tuple[int | None, bytes]) -> tuple[list[Record], ApcDecoder]:
    decoder = ApcDecoder("ABC1D23")
    out: list[Record] = []
    for ts_ms, data in chunks:
        out += decoder.feed(data, ts_ms)
    out += decoder.finish()
    for rec in out:
        validate(rec)
        if rec["kind"] == "door":
            assert rec["boarded"] >= 0
            assert rec["alighted"] >= 0
    return out, decoder


def fields(rec: Record) -> Record:
    return {k: v for k, v in rec.items() if k not in ("vehicle", "raw")}


def test_crc_check_value() -> None:
    assert crc16(b"123456789") == 0x29B1


def test_encoder_reproduces_the_hand_vectors() -> None:
    assert encode_request(1) == h(V1)
    assert encode_counts(1, DoorCounts(open=False, entered=258, exited=250)) == h(V2)
    assert encode_request(2, ACK_RESET) == h(V3_REQUEST)
    assert encode_ack(2) == h(V3_ANSWER)
    v4 = DoorCounts(open=True, entered=7, exited=3, blocked=True, counter_reset=True, resets=2)
    assert encode_counts(3, v4) == h(V4)
    assert encode_counts(4, DoorCounts(open=False, entered=16, exited=12, tamper=True)) == h(V7)


def test_frame_struct_reads_the_hand_vectors() -> None:
    body = Frame.parse(h(V4)).body.value
    assert (body.address, body.command, body.length) == (3, 0x81, 6)
    assert body.data == h("0b 02 00 07 00 03")
    assert Frame.parse(h(V1)).crc == 0xC89D


def test_encoder_refuses_bad_requests() -> None:
    with pytest.raises(ValueError, match="address"):
        encode_request(248)
    with pytest.raises(ValueError, match="command"):
        encode_request(1, 0x07)


def read_capture(path: Path) -> list[tuple[int | None, bytes]]:
    """A timestamped hex capture (the logger format of firmware-notes/apc.md)."""
    chunks: list[tuple[int | None, bytes]] = []
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            chunks.append((ts_to_ms(words[0]), bytes.fromhex("".join(words[1:]))))
    return chunks


def test_wrap_past_65535_counts_by_hand() -> None:
    out, decoder = decode(*read_capture(DATA / "wrap.hex"))
    assert [fields(r) for r in out] == [
        {"ts": "2026-03-02T14:23:35.021Z", "kind": "door", "door": 1, "open": True,
         "boarded": 4, "alighted": 0},  # 65534 - 65530
        {"ts": "2026-03-02T14:24:05.021Z", "kind": "door", "door": 1, "open": False,
         "boarded": 6, "alighted": 2},  # (4 - 65534) mod 65536, 102 - 100
    ]
    assert decoder.stats.requests == 3
    assert decoder.stats.responses == 3


def test_reset_is_never_read_as_a_wrap() -> None:
    out, decoder = decode(*read_capture(DATA / "reset.hex"))
    assert [fields(r) for r in out] == [
        {"ts": "2026-03-02T14:30:10.021Z", "kind": "door", "door": 2, "open": True,
         "boarded": 3, "alighted": 1},  # 1203 - 1200, 1181 - 1180
        {"ts": "2026-03-02T14:30:20.021Z", "kind": "device", "device": "apc",
         "status": "counter_reset", "detail": "address 2, door 2"},
        {"ts": "2026-03-02T14:30:30.021Z", "kind": "door", "door": 2, "open": False,
         "boarded": 5, "alighted": 1},  # 2 since the reset + (5 - 2); 0 + (1 - 0)
    ]
    assert decoder.pending_acks() == []  # the ACK_RESET went through


def test_second_reset_while_the_flag_is_latched_is_caught_by_resets() -> None:
    first = encode_counts(5, DoorCounts(False, 10, 8, counter_reset=True, resets=1))
    opened = encode_counts(5, DoorCounts(True, 14, 9, counter_reset=True, resets=1))
    again = encode_counts(5, DoorCounts(True, 2, 1, counter_reset=True, resets=2))
    closed = encode_counts(5, DoorCounts(False, 3, 1, counter_reset=True, resets=2))
    out, decoder = decode((T0, first), (T0 + 1000, opened), (T0 + 2000, again), (T0 + 3000, closed))
    doors = [(r["open"], r["boarded"], r["alighted"]) for r in out if r["kind"] == "door"]
    # apc.md: a first answer with the flag up counts from 0 (10 in, 8 out since the reset)
    assert doors == [(True, 10 + 4, 8 + 1), (False, 2 + 1, 1 + 0)]
    assert [r["status"] for r in out if r["kind"] == "device"] == ["counter_reset"]
    assert decoder.pending_acks() == [5]


def test_a_first_answer_with_the_flag_up_counts_from_zero() -> None:
    # apc.md "The first answer": flag down → a baseline only; flag up (never acknowledged
    # since the head started counting from 0) → its counts are passengers.
    acked = encode_counts(1, DoorCounts(False, 30, 20))
    fresh = encode_counts(2, DoorCounts(False, 7, 3, counter_reset=True))
    decoder = ApcDecoder("ABC1D23")
    assert decoder.feed(acked + fresh, T0) == []
    assert decoder.pending_passengers() == 7 + 3
    out = decoder.feed(encode_counts(2, DoorCounts(True, 9, 3, counter_reset=True)), T0 + 1000)
    assert [(r["door"], r["open"], r["boarded"], r["alighted"]) for r in out] == [
        (2, True, 7 + 2, 3)]


def test_a_stop_between_two_polls_is_reported_at_the_second() -> None:
    # Closed at both polls, 5 in and 4 out meanwhile: a door record closed with them, not
    # held until the next stop; no record for a closed door that counted nobody.
    base = encode_counts(1, DoorCounts(False, 100, 50))
    after = encode_counts(1, DoorCounts(False, 105, 54))
    out, _ = decode((T0, base), (T0 + 1000, after), (T0 + 2000, after))
    assert [fields(r) for r in out] == [
        {"ts": "2026-03-02T14:23:06.000Z", "kind": "door", "door": 1, "open": False,
         "boarded": 5, "alighted": 4},
    ]


def test_door_numbers_are_configured_per_address() -> None:
    decoder = ApcDecoder("ABC1D23", doors={7: 3})
    decoder.feed(encode_counts(7, DoorCounts(False, 0, 0)), T0)
    out = decoder.feed(encode_counts(7, DoorCounts(True, 1, 0)), T0 + 500)
    assert out[0]["door"] == 3
    assert decoder.door_number(9) == 9


def test_blocked_and_tamper_give_device_records_then_ok() -> None:
    base = encode_counts(4, DoorCounts(False, 16, 12))
    out, _ = decode((T0, base), (T0 + 1000, h(V7)), (T0 + 2000, base))
    assert [(r["kind"], r.get("status")) for r in out] == [("device", "tamper"), ("device", "ok")]
    blocked = encode_counts(1, DoorCounts(False, 0, 0, blocked=True))
    out, _ = decode((T0, blocked))  # a fault already there at the first answer is reported
    assert [r["status"] for r in out] == ["blocked"]


def test_without_a_time_records_are_held_and_counted() -> None:
    chunks = [(None, data) for _ts, data in read_capture(DATA / "wrap.hex")]
    decoder = ApcDecoder("ABC1D23")
    for _ts, data in chunks:
        assert decoder.feed(data) == []
    assert decoder.stats.undated == 2
    decoder.set_time(T0)
    out = decoder.finish()  # the passengers were kept, not lost
    assert [(r["boarded"], r["alighted"]) for r in out] == [(10, 2)]


# Hex table: (name, bus bytes, door records expected as (open, boarded, alighted), counters)
BASE = encode_counts(1, DoorCounts(False, 100, 50))
OPEN = encode_counts(1, DoorCounts(True, 103, 51))
BAD_CRC = OPEN[:-1] + bytes([OPEN[-1] ^ 0xFF])
TABLE = [
    ("clean", BASE + OPEN, [(True, 3, 1)], {"crc_failures": 0, "bytes_dropped": 0}),
    ("garbage before", b"\x00\xa5\xff\x13" + BASE + OPEN, [(True, 3, 1)], {"bytes_dropped": 4}),
    ("bad CRC then good", BASE + BAD_CRC + OPEN, [(True, 3, 1)], {"crc_failures": 1}),
    ("length too big", BASE + b"\xa5\x01\x81\x40" + OPEN, [(True, 3, 1)], {"bytes_dropped": 4}),
    ("requests between", h(V1) + BASE + h(V1) + OPEN, [(True, 3, 1)], {"requests": 2}),
    ("unknown command", BASE + bytes.fromhex("a5 01 85 00 1f c1") + OPEN, [(True, 3, 1)],
     {"unknown_types": 1, "crc_failures": 0}),
    ("cut at the end", BASE + OPEN + OPEN[:5], [(True, 3, 1)], {"bytes_dropped": 5}),
]


@pytest.mark.parametrize(("name", "data", "doors", "counters"), TABLE, ids=[t[0] for t in TABLE])
def test_hex_table(name: str, data: bytes, doors: list[tuple[bool, int, int]], counters: dict[str, int]) -> None:
    for step in (len(data), 1, 5):
        chunks = [(T0, data[i : i + step]) for i in range(0, len(data), step)]
        out, decoder = decode(*chunks)
        got = [(r["open"], r["boarded"], r["alighted"]) for r in out if r["kind"] == "door"]
        assert got == doors, (name, step)
        summary = decoder.stats.summary()
        for key, value in counters.items():
            assert summary[key] == value, (name, step, key)


def test_unknown_command_vector_has_a_good_crc() -> None:
    assert crc16(bytes.fromhex("01 85 00")) == 0x1FC1


def test_poller_round_robin_and_acks() -> None:
    poller = Poller("ABC1D23", [1, 2])
    assert poller.next_request() == h(V1)
    assert poller.next_request() == encode_request(2)
    assert poller.next_request() == h(V1)
    poller.feed(encode_counts(2, DoorCounts(False, 0, 0, counter_reset=True, resets=1)), T0)
    assert poller.next_request() == h(V3_REQUEST)  # acknowledge first
    assert poller.next_request() == encode_request(2)  # once per answer, not in a loop
    poller.feed(h(V3_REQUEST) + h(V3_ANSWER) + encode_counts(2, DoorCounts(False, 0, 0, resets=1)), T0)
    assert poller.next_request() == h(V1)  # flag down: plain round robin
    assert 0.02 < reply_timeout_s(19_200) < 0.05


def test_registered_as_apc() -> None:
    assert isinstance(registry.get("apc").make_decoder("X"), ApcDecoder)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=24), st.sampled_from(
    [h(V1), h(V2), h(V3_REQUEST), h(V3_ANSWER), h(V4), h(V7), b"\xa5", b"\xa5\x01\x81\x06"])),
    max_size=30))
def test_never_raises_on_any_bytes(parts: list[bytes]) -> None:
    decode((T0, b"".join(parts)))


def test_frota_decode_reads_timestamped_hex(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", "apc", "--hex",
         str(DATA / "reset.hex")],
        capture_output=True, text=True, check=True, cwd=PROJECT,
    )
    assert run.stdout.count('"kind":"door"') == 2
    assert '"undated": 0' in run.stderr
    bare = "\n".join(line.split(" ", 1)[1] for line in (DATA / "reset.hex").read_text().splitlines()
                     if not line.startswith("#"))
    run = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", "apc", "--hex"],
        input=bare, capture_output=True, text=True, cwd=PROJECT,
    )
    assert run.stdout == ""
    assert "no time" in run.stderr
    # Nothing decoded is a user error, said in one last line (issue 14).
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == (
        "frota decode: error: no record from stdin: every apc record was undated"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", "apc", "--hex"],
        input="2026-13-02T14:30:00Z a5\n", capture_output=True, text=True, cwd=PROJECT,
    )
    assert bad.returncode == 1
    assert "line 1" in bad.stderr
    assert "Traceback" not in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "frota", "decode", "--help"],
                            capture_output=True, text=True, check=True, cwd=PROJECT)
    assert "RFC 3339" in helped.stdout
    assert "apc" in helped.stdout


def test_state_saved_and_restored_counts_each_passenger_once() -> None:
    # A restart between two answers: the new decoder, given the saved state, counts from the
    # saved baseline; counts not yet reported when the state was saved are reported once.
    first = ApcDecoder("ABC1D23")
    first.feed(encode_counts(3, DoorCounts(open=False, entered=100, exited=50)), T0)
    first.feed(encode_counts(3, DoorCounts(open=True, entered=104, exited=50)), T0 + 1000)
    first.feed(encode_counts(3, DoorCounts(open=True, entered=106, exited=51)), T0 + 2000)
    saved = first.state()  # 2 boarded and 1 alighted since the open record, not yet reported
    assert saved["3"]["boarded"] == 2
    assert saved["3"]["alighted"] == 1
    second = ApcDecoder("ABC1D23")
    assert second.restore(saved) == 1
    out = second.feed(encode_counts(3, DoorCounts(open=False, entered=109, exited=55)), T0 + 9000)
    assert [fields(r) for r in out] == [
        {"ts": "2026-03-02T14:23:14.000Z", "kind": "door", "door": 3, "open": False,
         "boarded": 5, "alighted": 5},  # 2 + (109 - 106); 1 + (55 - 51)
    ]


def test_restore_skips_entries_that_do_not_parse() -> None:
    decoder = ApcDecoder("ABC1D23")
    assert decoder.restore({"1": {"last": {"open": True}}, "x": {}, "2": "nonsense"}) == 0
    assert decoder.state() == {}
