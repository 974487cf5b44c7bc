"""Registrador frames → records (docs/records.md): speed, driver, device, trip, incident.

Every record carries ``device_seq`` (the frame number) and ``raw`` (hex of the original frame;
for a frame downloaded by history, the original frame inside the 0x51 record). One status frame
may give several records (a speed record, a driver record per slot that changed, a device record
per flag that changed): they share ``device_seq`` and come out of the same ``feed`` call, in a
fixed order. A consumer therefore dedupes *frames*: if it already holds records with that
``device_seq``, the whole group is a repeat (e.g. a history download of a frame received live).

Changes are judged against the nearest earlier frame the decoder knows (by frame number, not by
arrival), so a frame downloaded later by history gives the records it would have given live.
If the frame before it was itself missing live, the change was already reported at the next
frame received; the history frame reports it again, earlier, with the same state.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from dataclasses import dataclass
from typing import Final

from construct import ConstructError

from protocols.base import DecoderStats
from protocols.records import MAX_TS_MS, Record, ms_to_ts
from protocols.registrador import frames as f
from protocols.registrador.flat import flatten
from protocols.registrador.scanner import LENGTHS, FrameScanner, RawFrame, check_frame

_STATUS: Final = flatten(f.STATUS_PAYLOAD).struct
_DRIVER: Final = flatten(f.DRIVER_EVENT_PAYLOAD).struct
_DEVICE: Final = flatten(f.DEVICE_EVENT_PAYLOAD).struct
_HISTORY_END: Final = flatten(f.HISTORY_END_PAYLOAD).struct
_ACTIVITY: Final = f.ACTIVITY_CODES
#: Flags that are levels (reported on change); FLAG_POWER is an event bit.
_LEVELS: Final = ((f.FLAG_COMPARTMENT, "compartment_open", "compartment closed"),
                  (f.FLAG_TAMPER, "tamper", "tamper cleared"),
                  (f.FLAG_FAULT, "fault", "sensor fault cleared"))
_LEVEL_MASK: Final = f.FLAG_COMPARTMENT | f.FLAG_TAMPER | f.FLAG_FAULT
_DEVICE_EVENT_FLAGS: Final = {1: (f.FLAG_FAULT, True), 2: (f.FLAG_FAULT, False),
                              3: (f.FLAG_TAMPER, True), 4: (f.FLAG_COMPARTMENT, True),
                              5: (f.FLAG_COMPARTMENT, False)}
#: Frames whose CLOCK is the registrador's (a reader's request carries the reader's, or 0).
_DEVICE_CLOCKED: Final = f.RECORDED_TYPES | {f.HISTORY_RECORD, f.HISTORY_END}
#: Latest clock value a record may carry (2100-12-31T23:59:59.999Z, docs/records.md): a frame
#: dated later is malformed.
MAX_CLOCK_MS: Final = MAX_TS_MS
MAX_SPEED: Final = 40_000  # 400.00 km/h, the contract's ceiling

SlotState = tuple[str | None, str]
#: (slot 1, slot 2, level flags) after a frame.
State = tuple[SlotState, SlotState, int]


class MalformedError(Exception):
    """A frame with a good CRC whose contents break the spec (internal; counted, never raised out)."""


@dataclass(frozen=True)
class HistoryEnd:
    """The registrador's answer closing a history request."""

    request_id: int
    first: int
    last: int
    sent: int
    oldest: int
    clock_ms: int


class RegistradorDecoder:
    """Stream decoder for one vehicle's registrador; ``feed`` never raises on wire data."""

    def __init__(self, vehicle: str, *, memory: int = 8192) -> None:
        self.vehicle = vehicle
        self.stats = DecoderStats()
        self.scanner = FrameScanner(self.stats)
        self.memory = memory
        self.last_clock_ms: int | None = None
        """The registrador's clock in the latest frame it sent (history contents excluded)."""
        self.highest_seq: int | None = None
        """The highest frame number seen, live or by history."""
        self.history_ends: list[HistoryEnd] = []
        """History-end answers received; the consumer may clear the list."""
        self._states: dict[int, State | None] = {}
        self._order: list[int] = []

    # --- stream --------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Record]:
        """Consume bytes from the wire and return the records completed by them."""
        return self._frames(self.scanner.feed(data))

    def finish(self) -> list[Record]:
        """End of stream: decode what a false start hid, count a truncated last frame as dropped."""
        return self._frames(self.scanner.finish())

    def set_time(self, ts_ms: int) -> None:
        """The clock hook: unused, the registrador stamps its frames with its own clock."""

    def _frames(self, frames: list[RawFrame]) -> list[Record]:
        out: list[Record] = []
        for frame in frames:
            self.stats.frames += 1
            kind = frame.type
            if kind in _DEVICE_CLOCKED and frame.clock_ms <= MAX_CLOCK_MS:
                self.last_clock_ms = frame.clock_ms
            if kind in f.RECORDED_TYPES:
                self._record(frame, out)
            elif kind == f.HISTORY_RECORD:
                inner = check_frame(frame.payload)
                if inner is None or inner.type not in f.RECORDED_TYPES:
                    self._malformed(frame, "history record without a recorded frame inside")
                elif len(inner.payload) not in LENGTHS[inner.type]:
                    # The scanner refuses such a frame on the wire; inside a history answer its
                    # CRC can be good and its length still wrong for its type.
                    self._malformed(frame, f"history record holds a type 0x{inner.type:02x} "
                                           f"frame of {len(inner.payload)} payload bytes")
                else:
                    self._record(inner, out)
            elif kind == f.HISTORY_END:
                first, last, sent, oldest = _HISTORY_END.unpack_from(frame.payload)
                self.history_ends.append(
                    HistoryEnd(frame.seq, first, last, sent, oldest, frame.clock_ms)
                )
            elif kind == f.HISTORY_REQUEST:
                self.stats.skipped += 1  # our own request, e.g. in a two-way capture
            else:
                self.stats.unknown_types += 1
                self.stats.bytes_dropped += len(frame.raw)
                self.stats.reject(f"unknown type 0x{kind:02x}", frame.raw)
        return out

    def gaps(self) -> list[tuple[int, int]]:
        """Missing frame numbers (inclusive ranges) between the oldest and newest frames known."""
        order = self._order
        return [(a + 1, b - 1) for a, b in itertools.pairwise(order) if b - a > 1]

    # --- frames → records -------------------------------------------------------------------------

    def _malformed(self, frame: RawFrame, why: str) -> None:
        self.stats.malformed += 1
        self.stats.bytes_dropped += len(frame.raw)
        self.stats.reject(f"malformed: {why}", frame.raw)

    def _record(self, frame: RawFrame, out: list[Record]) -> None:
        seq = frame.seq
        if self.highest_seq is None or seq > self.highest_seq:
            self.highest_seq = seq
        produced: list[Record] = []
        try:
            if frame.clock_ms > MAX_CLOCK_MS:
                raise MalformedError(f"clock {frame.clock_ms} ms is after 2100")
            if frame.type == f.STATUS:
                self._status(frame, produced)
            elif frame.type == f.DRIVER_EVENT:
                self._driver_event(frame, produced)
            elif frame.type == f.DEVICE_EVENT:
                self._device_event(frame, produced)
            else:
                self._console(frame, produced)
        except (MalformedError, ConstructError, UnicodeDecodeError, struct.error) as err:
            self._malformed(frame, str(err) or type(err).__name__)
            # Received, even if unusable: asking history for it again would give the same bytes.
            self._remember(seq, None)
            return
        out.extend(produced)

    def _previous(self, seq: int) -> State | None:
        """The state after the nearest lower frame known (None: unknown)."""
        order = self._order
        if order and order[-1] < seq:
            return self._states[order[-1]]
        index = bisect.bisect_left(order, seq)
        return self._states[order[index - 1]] if index > 0 else None

    def _remember(self, seq: int, state: State | None) -> None:
        """Record that frame ``seq`` was received and the state after it (None: unknown)."""
        order = self._order
        if seq in self._states:
            if state is None:
                return
        else:
            if not order or order[-1] < seq:
                order.append(seq)
            else:
                bisect.insort(order, seq)
            if len(order) > self.memory + 1024:
                for old in order[:1024]:
                    del self._states[old]
                del order[:1024]
        self._states[seq] = state

    def _base(self, frame: RawFrame) -> Record:
        return {"vehicle": self.vehicle, "ts": ms_to_ts(frame.clock_ms)}

    def _finish(self, rec: Record, frame: RawFrame) -> Record:
        rec["device_seq"] = frame.seq
        rec["raw"] = frame.raw.hex()
        return rec

    def _status(self, frame: RawFrame, out: list[Record]) -> None:
        speed, odometer, flags, card1, act1, card2, act2 = _STATUS.unpack_from(frame.payload)
        ts = ms_to_ts(frame.clock_ms)
        raw = frame.raw.hex()
        seq = frame.seq
        vehicle = self.vehicle
        slot1: SlotState = (
            (card1.rstrip(b"\0").decode("ascii") or None) if flags & f.FLAG_CARD1 else None,
            _ACTIVITY.get(act1, "unknown"),
        )
        slot2: SlotState = (
            (card2.rstrip(b"\0").decode("ascii") or None) if flags & f.FLAG_CARD2 else None,
            _ACTIVITY.get(act2, "unknown"),
        )
        if speed > MAX_SPEED:
            raise MalformedError(f"speed {speed / 100} km/h is out of range")
        out.append({
            "vehicle": vehicle, "ts": ts, "kind": "speed", "kmh": speed / 100,
            "odometer_m": odometer, "ignition": bool(flags & f.FLAG_IGNITION),
            "device_seq": seq, "raw": raw,
        })
        levels = flags & _LEVEL_MASK
        prev = self._previous(seq)
        for number, slot, before in ((1, slot1, prev[0] if prev else None),
                                     (2, slot2, prev[1] if prev else None)):
            if slot != before:
                out.append({
                    "vehicle": vehicle, "ts": ts, "kind": "driver", "slot": number,
                    "driver": slot[0], "activity": slot[1], "device_seq": seq, "raw": raw,
                })
        before_levels = prev[2] if prev else 0
        if levels != before_levels:
            # One record per status in a frame (consumers key device records by status): flags
            # that go off together make one ``ok`` whose detail names them all.
            cleared = []
            for bit, status, gone in _LEVELS:
                if levels & bit and not before_levels & bit:
                    out.append(self._device(ts, status, None, seq, raw))
                elif before_levels & bit and not levels & bit:
                    cleared.append(gone)
            if cleared:
                out.append(self._device(ts, "ok", "; ".join(cleared), seq, raw))
        if flags & f.FLAG_POWER:
            out.append(self._device(ts, "power_loss", "power interrupted before this frame", seq, raw))
        self._remember(seq, (slot1, slot2, levels))

    def _device(self, ts: str, status: str, detail: str | None, seq: int, raw: str) -> Record:
        rec: Record = {"vehicle": self.vehicle, "ts": ts, "kind": "device",
                       "device": "registrador", "status": status}
        if detail is not None:
            rec["detail"] = detail
        rec["device_seq"] = seq
        rec["raw"] = raw
        return rec

    def _driver_event(self, frame: RawFrame, out: list[Record]) -> None:
        number, event, card, activity = _DRIVER.unpack_from(frame.payload)
        if number not in (1, 2):
            raise MalformedError(f"driver slot {number} is not 1 or 2")
        if event not in f.DRIVER_EVENTS:
            raise MalformedError(f"driver event code {event} is unknown")
        name = card.rstrip(b"\0").decode("ascii") or None
        driver = None if f.DRIVER_EVENTS[event] == "card_out" else name
        slot: SlotState = (driver, _ACTIVITY.get(activity, "unknown"))
        rec = self._base(frame)
        rec.update(kind="driver", slot=number, driver=slot[0], activity=slot[1])
        out.append(self._finish(rec, frame))
        prev = self._previous(frame.seq)
        if prev is None:  # the other slot is unknown: the next status frame reports both
            self._remember(frame.seq, None)
            return
        state: State = (slot, prev[1], prev[2]) if number == 1 else (prev[0], slot, prev[2])
        self._remember(frame.seq, state)

    def _device_event(self, frame: RawFrame, out: list[Record]) -> None:
        event, code, value = _DEVICE.unpack_from(frame.payload)
        if event not in f.DEVICE_EVENTS:
            raise MalformedError(f"device event code {event} is unknown")
        status, detail = f.DEVICE_EVENTS[event]
        if event in (1, 2):
            detail = f"{detail} (code 0x{code:04x})"
        elif event == 8:
            if value > MAX_CLOCK_MS:
                raise MalformedError(f"clock before the set {value} ms is after 2100")
            detail = f"clock set; it read {ms_to_ts(value)}"
        rec = self._base(frame)
        rec.update(kind="device", device="registrador", status=status, detail=detail)
        out.append(self._finish(rec, frame))
        prev = self._previous(frame.seq)
        if prev is None:
            self._remember(frame.seq, None)
            return
        levels = prev[2]
        if event in _DEVICE_EVENT_FLAGS:
            bit, on = _DEVICE_EVENT_FLAGS[event]
            levels = levels | bit if on else levels & ~bit
        self._remember(frame.seq, (prev[0], prev[1], levels))

    def _console(self, frame: RawFrame, out: list[Record]) -> None:
        parsed = f.COMPILED[f.CONSOLE].parse(frame.payload)
        action = str(parsed.action)
        detail = parsed.detail
        rec = self._base(frame)
        expected = {"trip_start": 41, "trip_end": 41, "incident": 3}.get(action)
        if expected is not None and len(frame.payload) != expected:
            raise MalformedError(f"console {action} payload of {len(frame.payload)} bytes")
        if action in ("trip_start", "trip_end"):
            if not detail.trip or not detail.line:
                raise MalformedError("trip frame without a trip id or a line")
            rec.update(kind="trip", event=action[5:], trip=detail.trip, line=detail.line)
            if action == "trip_start" and detail.scheduled_ms:
                if detail.scheduled_ms > MAX_CLOCK_MS:
                    raise MalformedError("scheduled departure is after 2100")
                rec["scheduled"] = ms_to_ts(detail.scheduled_ms)
        elif action == "incident":
            if detail.cause not in f.INCIDENT_CAUSES:
                raise MalformedError(f"incident cause code {detail.cause} is unknown")
            rec.update(kind="incident", cause=f.INCIDENT_CAUSES[detail.cause])
            if detail.carrier_fault in (0, 1):
                rec["carrier_fault"] = bool(detail.carrier_fault)
            elif detail.carrier_fault != f.CARRIER_FAULT_UNDECLARED:
                raise MalformedError(f"carrier_fault byte {detail.carrier_fault} is not 0, 1 or 0xFF")
        else:
            raise MalformedError(f"console action {action} is unknown")
        out.append(self._finish(rec, frame))
        self._remember(frame.seq, self._previous(frame.seq))
