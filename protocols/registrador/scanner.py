"""Finds registrador frames in a byte stream: sync hunt, length check, CRC, resync by one byte.

Used by the decoder (device → agent) and by the simulator (agent → device requests). Reads no
clock, does no I/O and never raises on wire data: what it cannot use is counted in the shared
:class:`~protocols.base.DecoderStats` and its bytes kept (hex) as rejects.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from protocols.base import DecoderStats
from protocols.registrador import frames as f
from protocols.registrador.flat import flatten

#: LEN, TYPE, SEQ, CLOCK: derived from the construct BODY so the fast path cannot drift from it.
HEAD: Final = flatten(f.BODY, stop="payload").struct
_CRC: Final = struct.Struct(">H")

#: Payload lengths each known type may have; a known type with another length is a false start.
LENGTHS: Final[dict[int, frozenset[int]]] = {
    f.STATUS: frozenset({f.STATUS_SIZE}),
    f.DRIVER_EVENT: frozenset({f.DRIVER_EVENT_SIZE}),
    f.DEVICE_EVENT: frozenset({f.DEVICE_EVENT_SIZE}),
    f.CONSOLE: frozenset({1 + f.TRIP.sizeof(), 1 + f.INCIDENT.sizeof()}),
    f.HISTORY_REQUEST: frozenset({f.HISTORY_RANGE.sizeof()}),
    f.HISTORY_RECORD: frozenset(range(f.OVERHEAD, f.MAX_PAYLOAD + 1)),
    f.HISTORY_END: frozenset({f.HISTORY_END_SIZE}),
}

#: How many bytes of one run of junk are kept for the reject list (all of it is counted).
KEEP_JUNK = 512


class RawFrame(NamedTuple):
    """A frame whose sync, length and CRC are good; the payload is not yet interpreted."""

    type: int
    seq: int
    clock_ms: int
    payload: bytes
    raw: bytes


def check_frame(raw: bytes) -> RawFrame | None:
    """One complete frame (e.g. the payload of a history record) → RawFrame, or None if bad."""
    if len(raw) < f.OVERHEAD or raw[:2] != f.SYNC or len(raw) != f.OVERHEAD + raw[2]:
        return None
    if f.crc16(raw[2:-2]) != _CRC.unpack_from(raw, len(raw) - 2)[0]:
        return None
    length, kind, seq, clock = HEAD.unpack_from(raw, 2)
    return RawFrame(kind, seq, clock, raw[f.HEADER_SIZE : f.HEADER_SIZE + length], raw)


class FrameScanner:
    """Keeps a buffer across reads and returns the good frames completed by each one."""

    def __init__(self, stats: DecoderStats | None = None) -> None:
        self.stats = stats if stats is not None else DecoderStats()
        self._buf = bytearray()
        self._junk = bytearray()
        self._junk_count = 0
        self._junk_crc = 0

    @property
    def pending(self) -> int:
        """Bytes held waiting for the rest of a frame."""
        return len(self._buf)

    def _drop(self, data: bytes | bytearray, crc_failure: bool = False) -> None:
        self.stats.bytes_dropped += len(data)
        self._junk_count += len(data)
        if crc_failure:
            self._junk_crc += 1
        room = KEEP_JUNK - len(self._junk)
        if room > 0:
            self._junk += data[:room]

    def _flush_junk(self) -> None:
        if not self._junk_count:
            return
        reason = f"garbage ({self._junk_count} bytes"
        if self._junk_crc:
            reason += f", {self._junk_crc} CRC failures"
        self.stats.reject(reason + ")", bytes(self._junk))
        self._junk.clear()
        self._junk_count = self._junk_crc = 0

    def feed(self, data: bytes) -> list[RawFrame]:
        """Consume bytes from the wire; return the good frames they complete, in order."""
        stats = self.stats
        stats.bytes_in += len(data)
        buf = self._buf
        buf += data
        out: list[RawFrame] = []
        pos = 0
        end = len(buf)
        sync = f.SYNC
        crc16 = f.crc16
        lengths = LENGTHS
        while True:
            start = buf.find(sync, pos)
            if start < 0:
                # Keep a trailing 0xAA: it may be the first half of the next sync.
                keep = end - 1 if end > pos and buf[end - 1] == 0xAA else end
                if keep > pos:
                    self._drop(buf[pos:keep])
                pos = keep
                break
            if start > pos:
                self._drop(buf[pos:start])
                pos = start
            if end - start < 4:
                break
            length = buf[start + 2]
            allowed = lengths.get(buf[start + 3])
            if allowed is not None and length not in allowed:
                self._drop(buf[start : start + 1])  # a false start: slide one byte
                pos = start + 1
                continue
            stop = start + f.OVERHEAD + length
            if stop > end:
                break
            if crc16(buf[start + 2 : stop - 2]) != (buf[stop - 2] << 8 | buf[stop - 1]):
                stats.crc_failures += 1
                self._drop(buf[start : start + 1], crc_failure=True)
                pos = start + 1
                continue
            if self._junk_count:
                self._flush_junk()
            _, kind, seq, clock = HEAD.unpack_from(buf, start + 2)
            raw = bytes(buf[start:stop])
            out.append(RawFrame(kind, seq, clock, raw[f.HEADER_SIZE : stop - start - 2], raw))
            pos = stop
        if pos:
            del buf[:pos]
        return out

    def finish(self) -> list[RawFrame]:
        """End of stream: give up on the frame start still waiting for bytes, look past it.

        A false start near the end (garbage claiming a long LEN) must not hide the real frames
        after it, so the head byte is dropped and the rest scanned again until nothing is left.
        """
        out: list[RawFrame] = []
        while self._buf:
            self._drop(self._buf[:1])
            del self._buf[:1]
            out.extend(self.feed(b""))
        if self._junk_count:
            self.stats.reject(
                f"truncated or garbage at end of stream ({self._junk_count} bytes)",
                bytes(self._junk),
            )
            self._junk.clear()
            self._junk_count = self._junk_crc = 0
        return out
