"""BulkSlcanBus (agent/sources/slcan_bulk.py): python-can's slcan bus reading the port in bulk.

Driven through pyserial's ``loop://`` port (what is written is read back), so the bytes an adapter
sends arrive in one piece, split, or mixed with garbage exactly as written. Frames worked by hand
from the SLCAN text: ``t1232AABB`` is standard id 0x123 with data AA BB; ``T18FEF1008`` + 16 digits
is extended id 0x18FEF100 with 8 bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

import can
import pytest

from agent.sources.slcan_bulk import MAX_LINE, BulkSlcanBus

EXT = b"T18FEF10080011223344556677\r"


@pytest.fixture
def bus() -> Iterator[BulkSlcanBus]:
    """A listen-only bulk slcan bus on a loopback port, its set-up commands flushed."""
    opened = BulkSlcanBus(channel="loop://", bitrate=250_000, listen_only=True,
                          sleep_after_open=0, timeout=0.01)
    opened.flush()  # "S5", "C", "L" came back through the loop
    yield opened
    opened.shutdown()


def send(bus: BulkSlcanBus, data: bytes) -> None:
    bus.serialPortOrig.write(data)


def test_many_frames_in_one_read_come_out_one_per_recv_in_order(bus: BulkSlcanBus) -> None:
    send(bus, b"t1232AABB\r" + EXT + b"t7FF0\r")
    first, second, third = (bus.recv(0.5) for _ in range(3))
    assert first is not None
    assert second is not None
    assert third is not None
    assert (first.arbitration_id, first.is_extended_id, bytes(first.data)) == (0x123, False,
                                                                               b"\xaa\xbb")
    assert (second.arbitration_id, second.is_extended_id) == (0x18FEF100, True)
    assert bytes(second.data) == bytes.fromhex("0011223344556677")
    assert (third.arbitration_id, third.dlc) == (0x7FF, 0)
    assert bus.recv(0.05) is None


def test_a_frame_split_over_two_reads_is_read_whole(bus: BulkSlcanBus) -> None:
    send(bus, EXT[:11])
    assert bus.recv(0.05) is None
    send(bus, EXT[11:])
    msg = bus.recv(0.5)
    assert msg is not None
    assert bytes(msg.data) == bytes.fromhex("0011223344556677")


def test_a_line_that_is_not_text_is_dropped_alone(bus: BulkSlcanBus) -> None:
    send(bus, b"\xfe\xff\r" + b"t1232AABB\r")
    with pytest.raises(can.CanOperationError) as raised:
        bus.recv(0.5)
    assert isinstance(raised.value.__cause__, UnicodeDecodeError)
    msg = bus.recv(0.5)  # python-can's own _read would fail this line too (joined to the bad one)
    assert msg is not None
    assert msg.arbitration_id == 0x123


def test_bytes_without_a_line_end_cannot_grow_the_buffer(bus: BulkSlcanBus) -> None:
    send(bus, b"t" * (MAX_LINE + 1))
    with pytest.raises(can.CanOperationError):
        bus.recv(0.5)
    send(bus, b"\rt1232AABB\r")  # the end of the overlong line, then a frame
    msgs = []
    for _ in range(3):
        try:
            msgs.append(bus.recv(0.2))
        except (can.CanError, ValueError, IndexError):
            continue
    assert [m.arbitration_id for m in msgs if m is not None] == [0x123]
