"""FMS CAN frames → canonical records (firmware-notes/fms.md §6-§8): speed, driver, door, device.

``FmsDecoder(vehicle)`` takes frames (``frame``: a ``CanFrame`` or a python-can ``Message``) or
the bytes of a candump log / SLCAN stream (``feed``), and never raises on bus data.

- ``speed``: TCO1's tachograph vehicle speed, with ``odometer_m`` from the latest VDHR. TCO1
  comes 20 times a second; a record is written for the first TCO1 of each second of device
  time and at once whenever the vehicle starts or stops (TCO1's motion signal, or the speed
  reaching or leaving 0), so a stop or a start is never late by more than one frame.
- ``driver``: per slot, on every change of working state, card presence or identification (DI).
  A card present without a DI identification gives ``driver: null, card: true``.
- ``door``: DC2's doors 1 and 2 open/closed; a bus that sends only DC1 gives door 0 (DC1's
  "at least one door open"), until its first DC2. No passenger counts: FMS has none.
- ``device`` (``registrador``, the tachograph): ``fault`` when a TCO1 event (performance,
  system, handling) or an error value appears, ``ok`` when they clear, ``clock_jump`` when TD
  moves away from the time carried forward.

Time: see ``clock.TachographClock``. Before the first TD, frames are held (up to
``HOLD_SECONDS`` of receive time or ``HOLD_FRAMES`` frames) and dated backwards from it. If none
comes, TD is taken as absent: frames are dated by the consumer's estimate (``set_time``: the
agent's best time, or a ``frota decode --hex`` line's time stamp) when there is one, else
their records are dropped and counted ``undated`` (their state is still tracked).
"""

from __future__ import annotations

from collections import deque
from typing import Final

from cantools.database.errors import DecodeError

from protocols.fms import messages as m
from protocols.fms.clock import TachographClock, td_ms
from protocols.fms.frames import FrameLike, raw_hex
from protocols.fms.j1939 import pgn_of
from protocols.fms.state import BusState, Message
from protocols.fms.stats import FmsStats
from protocols.fms.text import FrameReader
from protocols.fms.transport import BamReassembler, Reassembled
from protocols.records import Record, ms_to_ts

HOLD_SECONDS: Final = 10.0
#: Latest time a record can carry (9999-12-31T23:59:59.999Z); receive stamps beyond ~3000 years.
MAX_MS: Final = 253_402_300_799_999
MAX_RX: Final = 1e11
HOLD_FRAMES: Final = 1000
_DATED: Final = frozenset({m.TCO1, m.VDHR, m.DC1, m.DC2, m.DI})
_KNOWN_UNUSED: Final = frozenset({m.CCVS1})


class FmsDecoder:
    """Stream decoder for one vehicle's FMS bus; ``feed``/``frame`` never raise on bus data."""

    def __init__(self, vehicle: str) -> None:
        self.vehicle = vehicle
        self.stats = FmsStats()
        self.reader = FrameReader(self.stats)
        self.transport = BamReassembler()
        self.clock = TachographClock()
        self.estimate_ms: int | None = None
        self.td_absent = False
        """No TD came within the hold limits: dating falls back to the estimate."""
        self._held: deque[Message] = deque()
        self.state = BusState(vehicle, self.stats)

    # --- input ---------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Record]:
        """Bytes of a candump log or an SLCAN stream → the records completed by them."""
        out: list[Record] = []
        for frame in self.reader.feed(data):
            out += self.frame(frame)
        return out

    def forget_time(self) -> None:
        """Drop the latest TD (e.g. after a gap in reading): frames wait for the next TD again,
        held and dated backwards from it as at the start (firmware-notes/fms.md §6)."""
        self.clock.anchor_ms = None
        self.clock.anchor_rx = None
        self.td_absent = False

    def set_time(self, ts_ms: int) -> None:
        """The consumer's best estimate of the time now, used only while TD is absent."""
        self.estimate_ms = ts_ms

    def finish(self) -> list[Record]:
        """End of stream: the last line, the frames still held, open transfers (incomplete)."""
        out: list[Record] = []
        for frame in self.reader.finish():
            out += self.frame(frame)
        if self._held:
            self.td_absent = True
            out += self._release()
        self.transport.finish()
        self._sync_transport()
        return out

    def frame(self, frame: FrameLike) -> list[Record]:
        """One received CAN frame → the records it completes (often none)."""
        self.stats.frames += 1
        try:
            return self._frame(frame)
        except (DecodeError, ValueError, TypeError, OverflowError) as err:
            self.stats.malformed += 1
            self.stats.reject(f"malformed: {err}", bytes(frame.data))
            return []

    def _frame(self, frame: FrameLike) -> list[Record]:
        if getattr(frame, "is_error_frame", False) or getattr(frame, "is_remote_frame", False):
            self.stats.error_frames += 1  # python-can reports bus errors and remote requests
            return []
        data = bytes(frame.data)
        rx = frame.timestamp
        if rx is not None and not 0 <= rx < MAX_RX:  # NaN, inf, negative: no usable stamp
            rx = None
        if not frame.is_extended_id:
            self.stats.foreign += 1
            return []
        if len(data) > 8:
            raise ValueError(f"{len(data)} data bytes: CAN FD is not FMS")
        can_id = frame.arbitration_id
        pgn = pgn_of(can_id)
        out: list[Record] = []
        if pgn in _DATED:
            self._dated(Message(pgn, data, raw_hex(frame), rx, self.estimate_ms), out)
        elif pgn == m.TD:
            self._td(data, raw_hex(frame), rx, out)
        elif pgn in (m.TP_CM, m.TP_DT):
            self._transport(pgn, can_id, data, raw_hex(frame), rx, out)
        elif pgn in _KNOWN_UNUSED:
            self.stats.skipped += 1
        else:
            self.stats.foreign += 1
        return out

    def _transport(self, pgn: int, can_id: int, data: bytes, raw: str, rx: float | None,
                   out: list[Record]) -> None:
        source, destination = can_id & 0xFF, (can_id >> 8) & 0xFF
        if pgn == m.TP_CM:
            self.transport.announce(source, destination, data, raw, rx)
            done: Reassembled | None = None
        else:
            done = self.transport.packet(source, destination, data, raw, rx)
        self._sync_transport()
        if done is None:
            return
        if done.pgn != m.DI:
            self.stats.foreign += 1
            return
        self._dated(Message(m.DI, done.data, "".join(done.raw), done.timestamp, self.estimate_ms),
                    out)

    def _sync_transport(self) -> None:
        t = self.transport.stats
        s = self.stats
        s.bam_complete, s.bam_incomplete, s.bam_orphans = (
            t.bam_complete, t.bam_incomplete, t.bam_orphans)
        s.bam_duplicates, s.bam_malformed, s.connection_mode = (
            t.bam_duplicates, t.bam_malformed, t.connection_mode)

    # --- time ----------------------------------------------------------------------------------

    def _td(self, data: bytes, raw: str, rx: float | None, out: list[Record]) -> None:
        ms = td_ms(m.decode_signals(m.TD, data))
        if ms is None:
            self.stats.not_available += 1
            self.stats.reject("TD not available or out of range", bytes.fromhex(raw))
            return
        moved = self.clock.set(ms, rx)
        self.stats.receive_steps = self.clock.receive_steps
        if moved is not None:
            out.append(self._device(ms, "clock_jump", f"TD moved {moved / 1000:+.3f} s from the "
                                    "tachograph time carried forward", raw))
        self.td_absent = False
        out += self._release()

    def _dated(self, message: Message, out: list[Record]) -> None:
        if self.clock.anchor_ms is not None or self.td_absent:
            out += self._decode(message, self._time(message))
            return
        held = self._held
        held.append(message)
        oldest = held[0].rx
        if len(held) > HOLD_FRAMES or (
            message.rx is not None and oldest is not None and message.rx - oldest > HOLD_SECONDS
        ):
            self.td_absent = True
            out += self._release()
        self.stats.held = len(held)

    def _time(self, message: Message, *, held: bool = False) -> int | None:
        if self.clock.anchor_ms is not None:
            return self.clock.date(message.rx, held=held)
        return message.estimate

    def _release(self) -> list[Record]:
        out: list[Record] = []
        while self._held:
            message = self._held.popleft()
            out += self._decode(message, self._time(message, held=True))
        self.stats.held = 0
        return out

    def _decode(self, message: Message, ms: int | None) -> list[Record]:
        """One message's records, dated ``ms``; a malformed message is counted, never raised."""
        try:
            return self._records(message, ms)
        except (DecodeError, ValueError, TypeError, OverflowError) as err:
            self.stats.malformed += 1
            self.stats.reject(f"malformed: {err}", bytes.fromhex(message.raw))
            return []

    def _records(self, message: Message, ms: int | None) -> list[Record]:
        if ms is not None and not 0 <= ms <= MAX_MS:
            ms = None  # a time ms_to_ts cannot write (past year 9999)
        produced: list[Record] = []
        pgn = message.pgn
        state = self.state
        if pgn == m.TCO1:
            state.tco1(message, ms, produced)
        elif pgn == m.VDHR:
            state.vdhr(message)
        elif pgn == m.DI:
            state.di(message, produced)
        elif pgn == m.DC1:
            state.dc1(message, produced)
        else:
            state.dc2(message, produced)
        if not produced:
            return produced
        if ms is None:
            self.stats.undated += len(produced)
            return []
        if self.clock.anchor_ms is None:
            self.stats.estimated += len(produced)
        ts = ms_to_ts(ms)
        for rec in produced:
            rec["ts"] = ts
        return produced

    def _device(self, ms: int, status: str, detail: str, raw: str) -> Record:
        return {"vehicle": self.vehicle, "ts": ms_to_ts(ms), "kind": "device",
                "device": "registrador", "status": status, "detail": detail, "raw": raw}
