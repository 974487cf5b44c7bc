"""J1939/21 transport protocol, broadcast (BAM) only: reassembly for the decoder, frames for the simulator.

A message longer than 8 bytes (DI, the driver identification) is announced by a TP.CM frame
(PGN 0xEC00 to the global address) with control byte 32: total size (2 bytes, little-endian),
number of packets, a reserved 0xFF, the PGN carried (3 bytes, little-endian). TP.DT frames
(PGN 0xEB00) follow, each a sequence number 1..N and 7 data bytes, the last padded with 0xFF.
Frota only listens, so the connection-mode transfers (RTS/CTS, sent to one address) are not
reassembled. python-can has no J1939 transport layer and the J1939 packages on PyPI bring a
stack that claims an address and transmits; a listen-only reassembler is ~100 lines, hence this.

Robustness (firmware-notes/fms.md §5): one session per source address, so sources interleave
freely; packets are stored by sequence number, so a packet out of order or repeated is harmless
(a repeat with other bytes is counted and the first kept); a session completes when every
packet 1..N is in; it is abandoned (counted ``bam_incomplete``) when the same source announces a
new message, when more than ``T1`` seconds of receive time pass without a packet of it (J1939's
T1, 750 ms), or at the end of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from protocols.fms.frames import CanFrame
from protocols.fms.j1939 import GLOBAL, make_id

BAM: Final = 32
TP_CM_PGN: Final = 0xEC00
TP_DT_PGN: Final = 0xEB00
#: J1939's limits: at least 9 bytes (8 fit one frame), at most 255 packets of 7 bytes.
MIN_SIZE: Final = 9
MAX_SIZE: Final = 1785
#: Receiver timeout between two packets of one session (J1939/21 T1), seconds.
T1: Final = 0.75


@dataclass
class TransportStats:
    """What the reassembler dropped (the decoder adds these to its summary)."""

    bam_complete: int = 0
    bam_incomplete: int = 0
    bam_orphans: int = 0
    bam_duplicates: int = 0
    bam_malformed: int = 0
    connection_mode: int = 0


@dataclass
class _Session:
    pgn: int
    size: int
    count: int
    last_seen: float | None
    frames: list[str]
    packets: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reassembled:
    """A message rebuilt from a BAM transfer."""

    pgn: int
    source: int
    data: bytes
    raw: list[str]
    """The transfer's frames as ``raw_hex`` strings (announcement first, packets in order)."""
    timestamp: float | None
    """The receive time of the packet that completed it."""


class BamReassembler:
    """Rebuilds BAM transfers from TP.CM/TP.DT frames; never raises on frame contents."""

    def __init__(self) -> None:
        self.stats = TransportStats()
        self._sessions: dict[int, _Session] = {}

    def announce(self, source: int, destination: int, data: bytes, raw: str,
                 timestamp: float | None) -> None:
        """A TP.CM frame from ``source``."""
        if len(data) < 8:
            self.stats.bam_malformed += 1
            return
        if data[0] != BAM or destination != GLOBAL:
            self.stats.connection_mode += 1  # RTS/CTS, CTS, ACK, abort: not for a listener
            return
        size = data[1] | data[2] << 8
        count = data[3]
        pgn = data[5] | data[6] << 8 | data[7] << 16
        if not MIN_SIZE <= size <= MAX_SIZE or count != -(-size // 7) or pgn > 0x3FFFF:
            self.stats.bam_malformed += 1
            return
        if source in self._sessions:
            self.stats.bam_incomplete += 1  # a new announcement aborts the previous transfer
        self._sessions[source] = _Session(pgn, size, count, timestamp, [raw])

    def packet(self, source: int, destination: int, data: bytes, raw: str,
               timestamp: float | None) -> Reassembled | None:
        """A TP.DT frame from ``source``; the rebuilt message when it is the last one missing."""
        session = self._sessions.get(source)
        if destination != GLOBAL:
            self.stats.connection_mode += 1
            return None
        if session is not None and self._expired(session, timestamp):
            del self._sessions[source]
            self.stats.bam_incomplete += 1
            session = None
        if session is None or len(data) < 2 or not 1 <= data[0] <= session.count:
            if session is None:
                self.stats.bam_orphans += 1
            else:
                self.stats.bam_malformed += 1
            return None
        seq = data[0]
        chunk = bytes(data[1:8])
        if timestamp is not None and (session.last_seen is None or timestamp > session.last_seen):
            session.last_seen = timestamp
        known = session.packets.get(seq)
        if known is not None:
            if known != chunk:
                self.stats.bam_duplicates += 1
            return None
        session.packets[seq] = chunk
        session.frames.append(raw)
        if len(session.packets) < session.count:
            return None
        del self._sessions[source]
        body = b"".join(session.packets[i] for i in range(1, session.count + 1))
        if len(body) < session.size:
            self.stats.bam_malformed += 1  # short final packets
            return None
        self.stats.bam_complete += 1
        order = [session.frames[0], *sorted(session.frames[1:], key=lambda h: h[8:10])]
        return Reassembled(session.pgn, source, body[: session.size], order, timestamp)

    def expire(self, timestamp: float | None) -> None:
        """Abandon sessions silent for longer than T1 at receive time ``timestamp``."""
        if timestamp is None:
            return
        for source, session in list(self._sessions.items()):
            if self._expired(session, timestamp):
                del self._sessions[source]
                self.stats.bam_incomplete += 1

    def finish(self) -> None:
        """End of stream: transfers still open are incomplete."""
        self.stats.bam_incomplete += len(self._sessions)
        self._sessions.clear()

    @staticmethod
    def _expired(session: _Session, timestamp: float | None) -> bool:
        return (
            timestamp is not None
            and session.last_seen is not None
            and timestamp - session.last_seen > T1
        )


def encode_bam(pgn: int, payload: bytes, *, source: int, priority: int = 7) -> list[CanFrame]:
    """The TP.CM announcement and TP.DT packets broadcasting ``payload`` (9-1785 bytes)."""
    size = len(payload)
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"a BAM carries 9-{MAX_SIZE} bytes, not {size}")
    count = -(-size // 7)
    cm = bytes([BAM, size & 0xFF, size >> 8, count, 0xFF,
                pgn & 0xFF, (pgn >> 8) & 0xFF, (pgn >> 16) & 0xFF])
    frames = [CanFrame(None, make_id(TP_CM_PGN, source, priority=priority), True, cm)]
    dt_id = make_id(TP_DT_PGN, source, priority=priority)
    for seq in range(1, count + 1):
        chunk = payload[(seq - 1) * 7 : seq * 7].ljust(7, b"\xff")
        frames.append(CanFrame(None, dt_id, True, bytes([seq]) + chunk))
    return frames
