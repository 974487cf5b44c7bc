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
from dataclasses import dataclass, fields
from typing import Final

from cantools.database.errors import DecodeError

from protocols.base import DecoderStats
from protocols.fms import messages as m
from protocols.fms.clock import TachographClock, td_ms
from protocols.fms.frames import FrameLike, raw_hex
from protocols.fms.j1939 import pgn_of
from protocols.fms.text import FrameReader
from protocols.fms.transport import BamReassembler, Reassembled
from protocols.records import Record, ms_to_ts

HOLD_SECONDS: Final = 10.0
#: Latest time a record can carry (9999-12-31T23:59:59.999Z); receive stamps beyond ~3000 years.
MAX_MS: Final = 253_402_300_799_999
MAX_RX: Final = 1e11
HOLD_FRAMES: Final = 1000
ACTIVITIES: Final = {0: "rest", 1: "available", 2: "work", 3: "drive"}
_DATED: Final = frozenset({m.TCO1, m.VDHR, m.DC1, m.DC2, m.DI})
_KNOWN_UNUSED: Final = frozenset({m.CCVS1})
#: TCO1 signal → (its error code, the condition's name) for 2-bit and 3-bit signals.
_ERRORS: Final = (
    ("Driver1WorkingState", 6, "driver 1 working state error"),
    ("Driver2WorkingState", 6, "driver 2 working state error"),
    ("VehicleMotion", 2, "vehicle motion error"),
    ("Driver1TimeRelatedStates", 14, "driver 1 time related states error"),
    ("Driver1Card", 2, "driver 1 card error"),
    ("VehicleOverspeed", 2, "vehicle overspeed error"),
    ("Driver2TimeRelatedStates", 14, "driver 2 time related states error"),
    ("Driver2Card", 2, "driver 2 card error"),
    ("SystemEvent", 2, "system event error"),
    ("HandlingInformation", 2, "handling information error"),
    ("TachographPerformance", 2, "tachograph performance error"),
    ("DirectionIndicator", 2, "direction indicator error"),
)
_EVENTS: Final = (
    ("TachographPerformance", "tachograph performance event"),
    ("SystemEvent", "system event (time adjustment, security breach, power or sensor fault)"),
    ("HandlingInformation", "handling information (e.g. no card while driving, printer)"),
)
SPEED_ERROR: Final = "tachograph vehicle speed error"
WORD_ERROR_MIN: Final = m.WORD_ERROR
WORD_ERROR_MAX: Final = m.WORD_NA - 1

SlotState = tuple[str | None, str, bool]
"""(driver id, activity, card present without an identification)."""


@dataclass
class FmsStats(DecoderStats):
    """DecoderStats plus what the FMS decoder set aside, and the transport protocol's counts."""

    foreign: int = 0
    """Frames of parameter groups Frota does not read (most of a bus's traffic)."""
    not_available: int = 0
    """Frames whose needed value was sent as "not available" (no record from them)."""
    sampled_out: int = 0
    """TCO1 frames that gave no speed record (the 1 Hz sampling)."""
    undated: int = 0
    """Records dropped for want of a time (no TD from the tachograph, no estimate)."""
    estimated: int = 0
    """Records dated by the consumer's estimate because the tachograph sent no TD."""
    held: int = 0
    """Frames waiting for the first TD right now."""
    bam_complete: int = 0
    bam_incomplete: int = 0
    bam_orphans: int = 0
    bam_duplicates: int = 0
    bam_malformed: int = 0
    connection_mode: int = 0

    def summary(self) -> dict[str, int]:
        """The counters as a dict, the FMS ones included."""
        base = super().summary()
        extra = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in base}
        extra.pop("rejected", None)
        return {**base, **extra}


@dataclass(frozen=True, slots=True)
class _Message:
    """A frame (or a reassembled DI) of a dated parameter group, as it waits to be decoded."""

    pgn: int
    data: bytes
    raw: str
    rx: float | None


class FmsDecoder:
    """Stream decoder for one vehicle's FMS bus; ``feed``/``frame`` never raise on bus data."""

    def __init__(self, vehicle: str) -> None:
        self.vehicle = vehicle
        self.counts = FmsStats()
        self.stats: DecoderStats = self.counts
        self.reader = FrameReader(self.counts)
        self.transport = BamReassembler()
        self.clock = TachographClock()
        self.estimate_ms: int | None = None
        self.td_absent = False
        """No TD came within the hold limits: dating falls back to the estimate."""
        self._held: deque[_Message] = deque()
        self._slots: list[SlotState | None] = [None, None]
        self._cards = [0, 0]
        self._ids: list[str | None] = [None, None]
        self._odometer_m: int | None = None
        self._conditions: frozenset[str] = frozenset()
        self._last_speed: tuple[int, int, bool] | None = None
        self._doors: dict[int, bool] = {}
        self._dc2_seen = False

    # --- input ---------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Record]:
        """Bytes of a candump log or an SLCAN stream → the records completed by them."""
        out: list[Record] = []
        for frame in self.reader.feed(data):
            out += self.frame(frame)
        return out

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
        data = bytes(frame.data)
        rx = frame.timestamp
        if rx is not None and not 0 <= rx < MAX_RX:  # NaN, inf, negative: no usable stamp
            rx = None
        if not frame.is_extended_id:
            self.counts.foreign += 1
            return []
        if len(data) > 8:
            raise ValueError(f"{len(data)} data bytes: CAN FD is not FMS")
        can_id = frame.arbitration_id
        pgn = pgn_of(can_id)
        out: list[Record] = []
        if pgn in _DATED:
            self._dated(_Message(pgn, data, raw_hex(frame), rx), out)
        elif pgn == m.TD:
            self._td(data, raw_hex(frame), rx, out)
        elif pgn in (m.TP_CM, m.TP_DT):
            self._transport(pgn, can_id, data, raw_hex(frame), rx, out)
        elif pgn in _KNOWN_UNUSED:
            self.stats.skipped += 1
        else:
            self.counts.foreign += 1
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
            self.counts.foreign += 1
            return
        self._dated(_Message(m.DI, done.data, "".join(done.raw), done.timestamp), out)

    def _sync_transport(self) -> None:
        t = self.transport.stats
        s = self.counts
        s.bam_complete, s.bam_incomplete, s.bam_orphans = (
            t.bam_complete, t.bam_incomplete, t.bam_orphans)
        s.bam_duplicates, s.bam_malformed, s.connection_mode = (
            t.bam_duplicates, t.bam_malformed, t.connection_mode)

    # --- time ----------------------------------------------------------------------------------

    def _td(self, data: bytes, raw: str, rx: float | None, out: list[Record]) -> None:
        ms = td_ms(m.decode_signals(m.TD, data))
        if ms is None:
            self.counts.not_available += 1
            self.stats.reject("TD not available or out of range", bytes.fromhex(raw))
            return
        moved = self.clock.set(ms, rx)
        if moved is not None:
            out.append(self._device(ms, "clock_jump", f"TD moved {moved / 1000:+.3f} s from the "
                                    "tachograph time carried forward", raw))
        self.td_absent = False
        out += self._release()

    def _dated(self, message: _Message, out: list[Record]) -> None:
        if self.clock.anchor_ms is not None or self.td_absent:
            out += self._decode(message, self._time(message.rx))
            return
        held = self._held
        held.append(message)
        oldest = held[0].rx
        if len(held) > HOLD_FRAMES or (
            message.rx is not None and oldest is not None and message.rx - oldest > HOLD_SECONDS
        ):
            self.td_absent = True
            out += self._release()
        self.counts.held = len(held)

    def _time(self, rx: float | None, *, held: bool = False) -> int | None:
        if self.clock.anchor_ms is not None:
            return self.clock.date(rx, held=held)
        return self.estimate_ms

    def _release(self) -> list[Record]:
        out: list[Record] = []
        while self._held:
            message = self._held.popleft()
            out += self._decode(message, self._time(message.rx, held=True))
        self.counts.held = 0
        return out

    def _decode(self, message: _Message, ms: int | None) -> list[Record]:
        """One message's records, dated ``ms``; a malformed message is counted, never raised."""
        try:
            return self._records(message, ms)
        except (DecodeError, ValueError, TypeError, OverflowError) as err:
            self.stats.malformed += 1
            self.stats.reject(f"malformed: {err}", bytes.fromhex(message.raw))
            return []

    def _records(self, message: _Message, ms: int | None) -> list[Record]:
        if ms is not None and not 0 <= ms <= MAX_MS:
            ms = None  # a time ms_to_ts cannot write (past year 9999)
        produced: list[Record] = []
        pgn = message.pgn
        if pgn == m.TCO1:
            self._tco1(message, ms, produced)
        elif pgn == m.VDHR:
            self._vdhr(message)
        elif pgn == m.DI:
            self._di(message, ms, produced)
        elif pgn == m.DC1:
            self._dc1(message, ms, produced)
        else:
            self._dc2(message, ms, produced)
        if not produced:
            return produced
        if ms is None:
            self.counts.undated += len(produced)
            return []
        if self.clock.anchor_ms is None:
            self.counts.estimated += len(produced)
        ts = ms_to_ts(ms)
        for rec in produced:
            rec["ts"] = ts
        return produced

    # --- messages → records --------------------------------------------------------------------

    def _base(self, kind: str) -> Record:
        return {"vehicle": self.vehicle, "ts": "", "kind": kind}

    def _device(self, ms: int, status: str, detail: str, raw: str) -> Record:
        return {"vehicle": self.vehicle, "ts": ms_to_ts(ms), "kind": "device",
                "device": "registrador", "status": status, "detail": detail, "raw": raw}

    def _tco1(self, message: _Message, ms: int | None, out: list[Record]) -> None:
        s = m.decode_signals(m.TCO1, message.data)
        raw = message.raw
        self._speed(s, ms, raw, out)
        for slot in (1, 2):
            card = s[f"Driver{slot}Card"]
            if self._cards[slot - 1] == 1 and card != 1:
                self._ids[slot - 1] = None  # the card came out: its DI identification is stale
            self._cards[slot - 1] = card
            self._slot(slot, ACTIVITIES.get(s[f"Driver{slot}WorkingState"], "unknown"), raw, out)
        conditions = {name for signal, code, name in _ERRORS if s[signal] == code}
        conditions |= {name for signal, name in _EVENTS if s[signal] == 1}
        if WORD_ERROR_MIN <= s["TachographVehicleSpeed"] <= WORD_ERROR_MAX:
            conditions.add(SPEED_ERROR)
        self._set_conditions(frozenset(conditions), raw, out)

    def _speed(self, s: dict[str, int], ms: int | None, raw: str, out: list[Record]) -> None:
        code = s["TachographVehicleSpeed"]
        if code > m.WORD_VALID_MAX:
            self.counts.not_available += 1
            return
        second = -1 if ms is None else ms // 1000
        key = (second, s["VehicleMotion"], code == 0)
        last = self._last_speed
        self._last_speed = key
        if last is not None and last == key:
            self.counts.sampled_out += 1
            return
        rec = self._base("speed")
        rec["kmh"] = code / 256
        if self._odometer_m is not None:
            rec["odometer_m"] = self._odometer_m
        rec["raw"] = raw
        out.append(rec)

    def _slot(self, slot: int, activity: str, raw: str, out: list[Record]) -> None:
        card = self._cards[slot - 1]
        ident = self._ids[slot - 1]
        if card == 1:
            state: SlotState = (ident, activity, ident is None)
        elif card == 3:  # presence not available: trust DI alone
            state = (ident, activity, False)
        else:
            state = (None, activity, False)
        if state == self._slots[slot - 1]:
            return
        self._slots[slot - 1] = state
        rec = self._base("driver")
        rec.update(slot=slot, driver=state[0], activity=activity)
        if state[2]:
            rec["card"] = True
        rec["raw"] = raw
        out.append(rec)

    def _set_conditions(self, conditions: frozenset[str], raw: str, out: list[Record]) -> None:
        before = self._conditions
        if conditions == before:
            return
        self._conditions = conditions
        for name in sorted(conditions - before):
            rec = self._base("device")
            rec.update(device="registrador", status="fault", detail=f"TCO1: {name}", raw=raw)
            out.append(rec)
        cleared = sorted(before - conditions)
        if cleared:
            rec = self._base("device")
            rec.update(device="registrador", status="ok",
                       detail="TCO1 cleared: " + "; ".join(cleared), raw=raw)
            out.append(rec)

    def _vdhr(self, message: _Message) -> None:
        code = m.decode_signals(m.VDHR, message.data)["TotalVehicleDistance"]
        if code > m.DWORD_VALID_MAX:
            self.counts.not_available += 1
            self._odometer_m = None
            return
        self._odometer_m = code * m.M_PER_BIT

    def _di(self, message: _Message, ms: int | None, out: list[Record]) -> None:
        driver1, driver2 = m.parse_di(message.data)
        self._ids = [driver1, driver2]
        if self._slots[0] is None and self._slots[1] is None:
            return  # no TCO1 yet: the working states are unknown, the next TCO1 reports both
        for slot in (1, 2):
            previous = self._slots[slot - 1]
            if previous is not None:
                self._slot(slot, previous[1], message.raw, out)

    def _door(self, door: int, is_open: bool, raw: str, out: list[Record]) -> None:
        if self._doors.get(door) == is_open:
            return
        self._doors[door] = is_open
        rec = self._base("door")
        rec.update(door=door, open=is_open, raw=raw)
        out.append(rec)

    def _dc1(self, message: _Message, ms: int | None, out: list[Record]) -> None:
        if self._dc2_seen:
            self.stats.skipped += 1  # DC2 tells the doors one by one
            return
        position = m.decode_signals(m.DC1, message.data)["PositionOfDoors"]
        if position > 2:
            self.counts.not_available += 1  # 14 error, 15 not available, 3-13 reserved
            return
        self._door(0, position != 2, message.raw, out)

    def _dc2(self, message: _Message, ms: int | None, out: list[Record]) -> None:
        s = m.decode_signals(m.DC2, message.data)
        for door in (1, 2):
            code = s[f"Door{door}Open"]
            if code > 1:
                self.counts.not_available += 1
                continue
            if not self._dc2_seen:
                self._dc2_seen = True
                if self._doors.get(0):  # DC1's door 0 is retired: it must not stay open
                    self._door(0, False, message.raw, out)
            self._door(door, code == 1, message.raw, out)
