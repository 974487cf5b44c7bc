"""The registrador (tachograph) simulated: a device model with its own memory, and ``frota sim registrador``.

:class:`RegistradorModel` holds the device's state (speed, odometer, ignition, slots, flags,
frame counter, memory), builds frames with the same construct definitions the decoder parses
(``protocols.registrador``) and answers history requests from its memory. It does no I/O and
reads no clock: a scenario player calls its methods with the device time; the runner
(:mod:`simulators.runner`) puts its frames on a pty. :class:`DefaultDrive` is the plausible day
``frota sim registrador`` plays when run alone.
"""

from __future__ import annotations

import argparse
import math
from collections import OrderedDict
from typing import Any, Final, Protocol

from protocols.registrador import frames as f
from protocols.registrador.encoder import (
    Slot,
    encode_device_event,
    encode_driver_event,
    encode_history_end,
    encode_history_record,
    encode_incident,
    encode_status,
    encode_trip,
)
from protocols.registrador.flat import flatten
from protocols.registrador.scanner import FrameScanner
from simulators.cli import add_line_arguments, serve
from simulators.clock import ScaledClock
from simulators.errors import SimulatorError
from simulators.runner import Emission

RATES: Final = (1.0, 2.0, 5.0, 10.0)
_RANGE: Final = flatten(f.HISTORY_RANGE).struct
#: Frames kept for history downloads: 27 hours at 1 Hz.
MEMORY: Final = 100_000


class RegistradorModel:
    """The registrador's behaviour: periodic status, events on demand, history from memory."""

    name = "registrador"

    def __init__(
        self,
        start_ms: int,
        *,
        rate_hz: float = 1.0,
        first_seq: int = 1,
        memory: int = MEMORY,
        odometer_m: float = 0.0,
    ) -> None:
        if rate_hz not in RATES:
            raise ValueError(f"status rate {rate_hz} Hz is not one of {RATES}")
        self.period_ms = int(1000 / rate_hz)
        self.kmh = 0.0
        self.odometer_m = float(odometer_m)
        self.ignition = True
        self.slots = [Slot(), Slot()]
        self.compartment_open = False
        self.tamper = False
        self.fault = False
        self.powered = True
        self._power_flag = False
        self.next_seq = first_seq
        self.capacity = memory
        self.memory: OrderedDict[int, bytes] = OrderedDict()
        self.next_status_ms = -(-start_ms // self.period_ms) * self.period_ms
        self._last_status_ms = start_ms
        self._pending: list[Emission] = []
        self._requests = FrameScanner()

    # --- what the runner calls ------------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        """Device time of the next status frame (or now, if events wait to go out)."""
        if self._pending:
            return 0
        return self.next_status_ms if self.powered else None

    def due(self, now_ms: int) -> list[Emission]:
        """Events queued so far and every status frame due by ``now_ms``, in frame order."""
        self._catch_up(now_ms)
        out, self._pending = self._pending, []
        return out

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """Bytes from the reader: history requests are answered, anything else is ignored."""
        self._catch_up(now_ms)
        out, self._pending = self._pending, []
        for frame in self._requests.feed(data):
            if frame.type == f.HISTORY_REQUEST and self.powered:
                first, last = _RANGE.unpack_from(frame.payload)
                out.extend(self.history(frame.seq, first, last, now_ms))
        return out

    # --- frames ---------------------------------------------------------------------------------

    def _record(self, frame: bytes, seq: int) -> Emission:
        self.memory[seq] = frame
        while len(self.memory) > self.capacity:
            self.memory.popitem(last=False)
        return Emission(frame, seq)

    def _take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def _catch_up(self, now_ms: int) -> None:
        """Build every status frame whose period boundary is at or before ``now_ms``."""
        while self.powered and self.next_status_ms <= now_ms:
            at = self.next_status_ms
            self.odometer_m += self.kmh / 3600.0 * (at - self._last_status_ms)
            self._last_status_ms = at
            seq = self._take_seq()
            frame = encode_status(
                seq, at, kmh=self.kmh, odometer_m=int(self.odometer_m), ignition=self.ignition,
                slot1=self.slots[0], slot2=self.slots[1],
                compartment_open=self.compartment_open, tamper=self.tamper, fault=self.fault,
                power_interrupted=self._power_flag,
            )
            self._power_flag = False
            self._pending.append(self._record(frame, seq))
            self.next_status_ms += self.period_ms

    def _event(self, now_ms: int, build: Any, **fields: Any) -> None:
        self._catch_up(now_ms)
        if not self.powered:
            return
        seq = self._take_seq()
        self._pending.append(self._record(build(seq, now_ms, **fields), seq))

    def history(self, request_id: int, first: int, last: int, now_ms: int) -> list[Emission]:
        """The answer to a history request: the frames first…last still in memory, then the end."""
        out: list[Emission] = []
        if self.memory and first <= last:
            oldest = next(iter(self.memory))
            newest = next(reversed(self.memory))
            for seq in range(max(first, oldest), min(last, newest) + 1):
                original = self.memory.get(seq)
                if original is not None:
                    record = encode_history_record(request_id, now_ms, original)
                    out.append(Emission(record, f"history {seq}"))
        oldest = next(iter(self.memory)) if self.memory else 0
        end = encode_history_end(
            request_id, now_ms, first=first, last=last, sent=len(out), oldest=oldest
        )
        out.append(Emission(end, "history end"))
        return out

    # --- what drivers, workshops and scenarios do ------------------------------------------------

    def set_speed(self, kmh: float, now_ms: int) -> None:
        """The vehicle's speed from ``now_ms`` on (the odometer integrates it)."""
        self._catch_up(now_ms)
        self.kmh = max(0.0, min(kmh, 400.0))

    def set_ignition(self, on: bool, now_ms: int) -> None:
        """Turn the ignition on or off."""
        self._catch_up(now_ms)
        self.ignition = on

    def insert_card(self, slot: int, card: str, activity: str, now_ms: int) -> None:
        """A driver inserts a card in slot 1 or 2."""
        self._catch_up(now_ms)
        self.slots[slot - 1] = Slot(card, activity)
        self._event(now_ms, encode_driver_event, slot=slot, event="card_in", state=self.slots[slot - 1])

    def withdraw_card(self, slot: int, now_ms: int) -> None:
        """The card in slot 1 or 2 is taken out."""
        self._catch_up(now_ms)
        card = self.slots[slot - 1].card
        self.slots[slot - 1] = Slot()
        self._event(now_ms, encode_driver_event, slot=slot, event="card_out", state=Slot(card))

    def set_activity(self, slot: int, activity: str, now_ms: int) -> None:
        """The driver in a slot declares an activity (drive, work, available, rest)."""
        self._catch_up(now_ms)
        current = self.slots[slot - 1]
        if current.card is None or current.activity == activity:
            return
        self.slots[slot - 1] = Slot(current.card, activity)
        self._event(now_ms, encode_driver_event, slot=slot, event="activity", state=self.slots[slot - 1])

    def device_event(self, event: str, now_ms: int, *, code: int = 0, value: int = 0) -> None:
        """A device event (fault, fault_cleared, tamper, compartment_opened/closed, clock_set)."""
        self._catch_up(now_ms)
        if event == "fault":
            self.fault = True
        elif event == "fault_cleared":
            self.fault = False
        elif event == "tamper":
            self.tamper = True
        elif event in ("compartment_opened", "compartment_closed"):
            self.compartment_open = event == "compartment_opened"
        self._event(now_ms, encode_device_event, event=event, code=code, value=value)

    def trip(self, event: str, trip: str, line: str, now_ms: int, scheduled_ms: int | None = None) -> None:
        """The driver keys a trip start or end on the console."""
        self._event(now_ms, encode_trip, event=event, trip=trip, line=line, scheduled_ms=scheduled_ms)

    def incident(self, cause: str, carrier_fault: bool | None, now_ms: int) -> None:
        """The driver keys an incident on the console."""
        self._event(now_ms, encode_incident, cause=cause, carrier_fault=carrier_fault)

    def power_off(self, now_ms: int) -> None:
        """The supply drops: a last power_loss event from the capacitor, then silence."""
        self.device_event("power_loss", now_ms)
        self.powered = False

    def power_on(self, now_ms: int) -> None:
        """The supply is back: power_restored, and the next status frame carries flag bit 6."""
        if self.powered:
            return
        self.powered = True
        self._power_flag = True
        self._last_status_ms = now_ms
        self.next_status_ms = -(-now_ms // self.period_ms) * self.period_ms
        self._event(now_ms, encode_device_event, event="power_restored")


class Tachograph(Protocol):
    """What :class:`DefaultDrive` and the scenario player drive: the registrador's model, or the
    FMS bus's (``simulators.fms.FmsBus``), which has the same methods."""

    def set_speed(self, kmh: float, now_ms: int) -> None: ...
    def insert_card(self, slot: int, card: str, activity: str, now_ms: int) -> None: ...
    def set_activity(self, slot: int, activity: str, now_ms: int) -> None: ...
    def trip(self, event: str, trip: str, line: str, now_ms: int,
             scheduled_ms: int | None = None) -> None: ...


class DefaultDrive:
    """A plausible intercity leg, repeated: terminal stop, accelerate, cruise, slow, stop, break."""

    #: (seconds, speed at the end of the segment in km/h); speed ramps linearly within a segment.
    SEGMENTS: Final = (
        (120, 0.0), (60, 80.0), (900, 80.0), (45, 0.0), (90, 0.0),
        (75, 95.0), (1500, 90.0), (60, 0.0), (1800, 0.0),
    )

    def __init__(self, model: Tachograph, start_ms: int) -> None:
        self.model = model
        self.start_ms = start_ms
        self.cycle_ms = sum(seconds for seconds, _ in self.SEGMENTS) * 1000
        self.started = False

    def speed_at(self, now_ms: int) -> float:
        """The profile's speed at a device time (with a gentle wobble while cruising)."""
        t = (now_ms - self.start_ms) % self.cycle_ms
        previous = 0.0
        for seconds, target in self.SEGMENTS:
            length = seconds * 1000
            if t < length:
                speed = previous + (target - previous) * t / length
                if speed > 30:
                    speed += 3.0 * math.sin(now_ms / 37_000.0)
                return max(0.0, round(speed, 2))
            t -= length
            previous = target
        return 0.0

    def step(self, now_ms: int) -> None:
        """Move the model to what the profile says at ``now_ms``."""
        model = self.model
        if not self.started:
            self.started = True
            model.insert_card(1, "04512345678", "work", now_ms)
            model.insert_card(2, "04598765432", "available", now_ms)
            model.trip("start", "T-0001", "SP-0401", now_ms, scheduled_ms=now_ms + 60_000)
        kmh = self.speed_at(now_ms)
        model.set_speed(kmh, now_ms)
        stopped_long = (now_ms - self.start_ms) % self.cycle_ms >= self.cycle_ms - 1_700_000
        if kmh > 0:
            model.set_activity(1, "drive", now_ms)
        else:
            model.set_activity(1, "rest" if stopped_long else "work", now_ms)


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim registrador``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "registrador",
        help="the tachograph on a pty: status frames, events, history from its memory",
        description="Simulate the registrador (tachograph) on a pseudo-terminal at 115200 8N1: "
        "status frames at --rate, driver and console events of a default drive profile, and "
        "answers to history requests from its own memory (firmware-notes/registrador.md). "
        "Prints the tty path on stdout.",
    )
    parser.add_argument(
        "--rate", type=float, default=1.0, choices=RATES, metavar="HZ",
        help="status frames per second of device time: 1, 2, 5 or 10 (default 1)",
    )
    parser.add_argument(
        "--first-seq", type=int, default=1, metavar="N", help="frame number of the first frame"
    )
    parser.add_argument(
        "--history", type=float, default=0.0, metavar="SECONDS",
        help="start with SECONDS of device time already in memory, as if the device had run "
        "that long before the line was connected: a backlog for a reader to download (at most "
        "its memory of 100,000 frames; default 0)",
    )
    parser.add_argument(
        "--idle", action="store_true",
        help="no drive profile: a parked bus (speed 0, no cards), status frames only",
    )
    add_line_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``frota sim registrador``: run the model on a pty until interrupted or --duration."""
    if args.first_seq < 0:
        raise SimulatorError(f"--first-seq must be >= 0, not {args.first_seq}")
    if not 0 <= args.history * args.rate <= MEMORY:
        raise SimulatorError(f"--history must be 0-{MEMORY / args.rate:g} seconds at --rate "
                        f"{args.rate:g} (a memory of {MEMORY:,} frames), not {args.history:g}")
    drive: list[DefaultDrive] = []

    def factory(clock: ScaledClock) -> RegistradorModel:
        # --history counts back from the device clock's start (--start), not from whenever this
        # runs: under load the factory is called a fraction of a real second later, which at a
        # time scale is seconds of device time.
        start = clock.started_ms
        made_from = start - int(args.history * 1000)
        model = RegistradorModel(made_from, rate_hz=args.rate, first_seq=args.first_seq)
        if not args.idle:
            drive.append(DefaultDrive(model, made_from))
        # --history: the frames of the time before the line existed, made into memory only.
        for now_ms in range(made_from, start, 1000):
            for profile in drive:
                profile.step(now_ms)
            model.due(now_ms)
        if args.history > 0:
            model.due(start - 1)
        return model

    def on_step(now_ms: int) -> None:
        for profile in drive:
            profile.step(now_ms)

    return serve(args, factory, on_step)
