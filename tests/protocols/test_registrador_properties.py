"""Properties of the registrador decoder over generated frames, garbage and read boundaries."""

from __future__ import annotations

import itertools
from typing import Any

from construct import ConstructError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from protocols.registrador import (
    Slot,
    encode_device_event,
    encode_driver_event,
    encode_incident,
    encode_status,
    encode_trip,
)
from protocols.registrador import frames as f
from protocols.registrador.decoder import MAX_CLOCK_MS
from protocols.registrador.flat import flatten
from tests.protocols.registrador_vectors import decode, seqs

CARD = st.text(alphabet="0123456789ABCDEFXYZ-", min_size=1, max_size=16)
ACTIVITY = st.sampled_from(["drive", "work", "available", "rest"])
SLOT = st.one_of(st.just(Slot()), st.builds(Slot, CARD, ACTIVITY))
#: Clocks records may carry (1970-2100, docs/records.md); later ones are malformed frames.
CLOCK = st.integers(0, MAX_CLOCK_MS)

STATUS = st.fixed_dictionaries({
    "kmh": st.integers(0, 40_000).map(lambda v: v / 100),
    "odometer_m": st.integers(0, 2**32 - 1),
    "ignition": st.booleans(),
    "slot1": SLOT,
    "slot2": SLOT,
    "compartment_open": st.booleans(),
    "tamper": st.booleans(),
    "fault": st.booleans(),
    "power_interrupted": st.booleans(),
})


def _builder(encode: Any, fields: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    return st.tuples(st.just(encode), fields)


FRAME_SPEC = st.one_of(
    _builder(encode_status, STATUS),
    _builder(encode_driver_event, st.fixed_dictionaries({
        "slot": st.sampled_from([1, 2]),
        "event": st.sampled_from(["card_in", "card_out", "activity"]),
        "state": st.builds(Slot, CARD, ACTIVITY),
    })),
    _builder(encode_device_event, st.fixed_dictionaries({
        "event": st.sampled_from(sorted(f.DEVICE_EVENT_BY_NAME)),
        "code": st.integers(0, 0xFFFF),
        "value": st.integers(0, MAX_CLOCK_MS),
    })),
    _builder(encode_trip, st.fixed_dictionaries({
        "event": st.sampled_from(["start", "end"]),
        "trip": CARD,
        "line": CARD,
        "scheduled_ms": st.one_of(st.none(), st.integers(1, MAX_CLOCK_MS)),
    })),
    _builder(encode_incident, st.fixed_dictionaries({
        "cause": st.sampled_from(sorted(f.INCIDENT_CAUSE_BY_NAME)),
        "carrier_fault": st.one_of(st.none(), st.booleans()),
    })),
)


def build_frames(specs: list[tuple[Any, dict[str, Any]]], clocks: list[int]) -> list[bytes]:
    """Frames numbered 1…N from the drawn specs."""
    return [
        encode(seq, clock, **fields)
        for seq, ((encode, fields), clock) in enumerate(zip(specs, clocks, strict=False), start=1)
    ]


FRAMES = st.integers(1, 8).flatmap(
    lambda n: st.tuples(st.lists(FRAME_SPEC, min_size=n, max_size=n),
                        st.lists(CLOCK, min_size=n, max_size=n))
).map(lambda drawn: build_frames(*drawn))

ONE_FRAME = st.tuples(FRAME_SPEC, CLOCK).map(lambda t: t[0][0](7, t[1], **t[0][1]))

#: Garbage made to look like frames: sync bytes, cut-off frames, frames with a flipped bit.
TRICKY = st.one_of(
    st.binary(max_size=24),
    st.just(f.SYNC),
    st.sampled_from([b"\xaa", b"\xaa\x55\x29\x01", b"\xaa\x55\xff\x7e", b"\xaa\x55\x13\x02"]),
    st.tuples(ONE_FRAME, st.integers(1, 200)).map(lambda t: t[0][: min(t[1], len(t[0]) - 1)]),
    st.tuples(ONE_FRAME, st.integers(0, 10_000), st.integers(0, 7)).map(lambda t: _flip(*t)),
)


def _flip(frame: bytes, index: int, bit: int) -> bytes:
    i = 2 + index % (len(frame) - 2)  # leave the sync alone so it looks like a frame
    return frame[:i] + bytes([frame[i] ^ (1 << bit)]) + frame[i + 1 :]


GARBAGE = st.lists(TRICKY, max_size=4).map(b"".join)


def _spurious_frame(stream: bytes, starts: set[int]) -> bool:
    """True if a CRC-valid frame starts anywhere but at a real frame (the reference parser)."""
    index = stream.find(f.SYNC)
    while index >= 0:
        if index not in starts:
            try:
                f.FRAME.parse(stream[index:])
            except ConstructError:
                pass
            else:
                return True
        index = stream.find(f.SYNC, index + 1)
    return False


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


@settings(deadline=None, max_examples=100)
@given(frames=FRAMES, garbage=st.lists(GARBAGE, min_size=9, max_size=9),
       cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_frames_among_garbage_without_valid_frames_decode_exactly(
    frames: list[bytes], garbage: list[bytes], cuts: list[int]
) -> None:
    stream = b""
    starts = set()
    for frame, junk in zip(frames, garbage, strict=False):
        stream += junk
        starts.add(len(stream))
        stream += frame
    stream += garbage[-1]
    assume(not _spurious_frame(stream, starts))
    records, decoder = decode(*_split(stream, cuts))
    assert seqs(records) == list(range(1, len(frames) + 1))
    assert decoder.stats.frames == len(frames)
    assert decoder.stats.bytes_dropped == len(stream) - sum(map(len, frames))


@settings(deadline=None, max_examples=100)
@given(frames=FRAMES, garbage=st.lists(st.binary(max_size=80), min_size=9, max_size=9),
       cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_frames_appear_in_order_whatever_the_garbage(
    frames: list[bytes], garbage: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(junk + frame for junk, frame in zip(garbage, frames, strict=False))
    stream += garbage[-1]
    records, _ = decode(*_split(stream, cuts))
    raws = [r["raw"] for r in records]
    position = 0
    for frame in frames:
        assert frame.hex() in raws[position:]
        position = raws.index(frame.hex(), position) + 1


@settings(deadline=None)
@given(fields=STATUS, seq=st.integers(0, 2**32 - 1), clock=st.integers(0, MAX_CLOCK_MS))
def test_status_round_trip(fields: dict[str, Any], seq: int, clock: int) -> None:
    records, _ = decode(encode_status(seq, clock, **fields))
    speed = records[0]
    assert speed["kmh"] == fields["kmh"]
    assert speed["odometer_m"] == fields["odometer_m"]
    assert speed["ignition"] == fields["ignition"]
    assert all(r["device_seq"] == seq for r in records)
    drivers = {r["slot"]: (r["driver"], r["activity"]) for r in records if r["kind"] == "driver"}
    for number, slot in ((1, fields["slot1"]), (2, fields["slot2"])):
        expected = (slot.card, slot.activity) if slot.card else (None, "unknown")
        assert drivers[number] == expected


ASCII16 = st.lists(st.integers(0, 127), min_size=16, max_size=16).map(bytes)


@given(head=st.binary(min_size=7, max_size=7), card1=ASCII16, card2=ASCII16,
       act1=st.binary(min_size=1, max_size=1), act2=st.binary(min_size=1, max_size=1))
def test_fast_layout_equals_construct(
    head: bytes, card1: bytes, card2: bytes, act1: bytes, act2: bytes
) -> None:
    payload = head + card1 + act1 + card2 + act2
    layout = flatten(f.STATUS_PAYLOAD)
    values = list(layout.struct.unpack_from(payload))
    for index in layout.strings:
        values[index] = values[index].rstrip(b"\0")
    parsed = f.STATUS_PAYLOAD.parse(payload)
    reference = [
        parsed.speed, parsed.odometer_m, parsed.flags,
        parsed.slot1.card.encode("ascii"), parsed.slot1.activity,
        parsed.slot2.card.encode("ascii"), parsed.slot2.activity,
    ]
    assert values == reference
