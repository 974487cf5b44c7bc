"""What the bus last said about the vehicle, and the records each new message's changes give.

One ``BusState`` per vehicle: the driver slots (working state, card, DI identification), the
TCO1 conditions (events and error values), the odometer, the doors and the last speed sampled.
Each method takes one decoded message and appends the records it causes, undated (``ts`` is
filled in by the decoder, which knows the time: firmware-notes/fms.md §6-§8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocols.fms import messages as m
from protocols.fms.stats import FmsStats
from protocols.records import Record

ACTIVITIES: Final = {0: "rest", 1: "available", 2: "work", 3: "drive"}
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


@dataclass(frozen=True, slots=True)
class Message:
    """A frame (or a reassembled DI) of a parameter group that gives records."""

    pgn: int
    data: bytes
    raw: str
    rx: float | None
    estimate: int | None = None
    """The consumer's time estimate when it arrived (used only if TD is absent)."""


class BusState:
    """The vehicle as the FMS bus last described it."""

    def __init__(self, vehicle: str, counts: FmsStats) -> None:
        self.vehicle = vehicle
        self.counts = counts
        self._slots: list[SlotState | None] = [None, None]
        self._cards = [0, 0]
        self._ids: list[str | None] = [None, None]
        self._odometer_m: int | None = None
        self._conditions: frozenset[str] = frozenset()
        self._last_speed: tuple[int, int, bool] | None = None
        self._doors: dict[int, bool] = {}
        self._dc2_seen = False

    def _base(self, kind: str) -> Record:
        return {"vehicle": self.vehicle, "ts": "", "kind": kind}

    def tco1(self, message: Message, ms: int | None, out: list[Record]) -> None:
        """TCO1 (dated ``ms``, for the 1 Hz sampling): speed, driver slots, conditions."""
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

    def vdhr(self, message: Message) -> None:
        """VDHR: the odometer for the next speed records (none of its own)."""
        code = m.decode_signals(m.VDHR, message.data)["TotalVehicleDistance"]
        if code > m.DWORD_VALID_MAX:
            self.counts.not_available += 1
            self._odometer_m = None
            return
        self._odometer_m = code * m.M_PER_BIT

    def di(self, message: Message, out: list[Record]) -> None:
        """DI: the slots' identifications; a driver record for each slot it changes."""
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

    def dc1(self, message: Message, out: list[Record]) -> None:
        """DC1: door 0 ("at least one door open") while the bus has sent no DC2."""
        if self._dc2_seen:
            self.counts.skipped += 1  # DC2 tells the doors one by one
            return
        position = m.decode_signals(m.DC1, message.data)["PositionOfDoors"]
        if position > 2:
            self.counts.not_available += 1  # 14 error, 15 not available, 3-13 reserved
            return
        self._door(0, position != 2, message.raw, out)

    def dc2(self, message: Message, out: list[Record]) -> None:
        """DC2: doors 1 and 2, each on change; the first DC2 retires DC1's door 0."""
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
