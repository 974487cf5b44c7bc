"""A bus's FMS CAN traffic, simulated: what the tachograph and the body controller broadcast, and
an SLCAN adapter that puts it on a pseudo-terminal (``frota sim fms``).

:class:`FmsBus` holds the vehicle's state (speed, odometer, slots, doors, tachograph events) with
the same methods as :class:`~simulators.registrador.RegistradorModel` (``set_speed``,
``insert_card``, ``set_activity``, ``device_event``…), so :class:`~simulators.registrador.DefaultDrive`
and the scenario player drive either; it builds frames with the encoders the decoder is tested
against (``protocols.fms``). Per tick of ``1000 / tco1_hz`` ms of device time it sends TCO1; at
each whole second first TD (the tachograph's clock), DI when it changed or every 10 s (a BAM
transfer when longer than 8 bytes), VDHR and DC2. Trips and incidents are not on the FMS bus:
they are kept in :attr:`FmsBus.console` for the operator to enter.

:class:`SlcanAdapter` is the runner's device model: a CANable-like adapter that answers the host's
commands (``C``, ``S0``-``S8``, ``O``, ``L``, ``V``, ``N``, ``Z``: CR for OK, BEL for an error)
and, once opened, forwards every frame as an SLCAN line. In listen-only mode (``L``) a transmit
command is refused with BEL and counted (:attr:`SlcanAdapter.transmit_attempts`), as a real
adapter's controller would not send it: Frota must never send on the vehicle bus.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any, Final

from frota.errors import UserError
from protocols.fms import (
    CanFrame,
    Tco1,
    encode_dc2,
    encode_di,
    encode_tco1,
    encode_td,
    encode_vdhr,
    slcan,
    speed_code,
)
from simulators.cli import add_line_arguments, serve
from simulators.clock import ScaledClock
from simulators.registrador import DefaultDrive
from simulators.runner import Emission

#: TCO1 rates a simulated tachograph may send at (the FMS standard's is 20 Hz).
TCO1_RATES: Final = (1, 2, 5, 10, 20)
#: TCO1 working-state codes (firmware-notes/fms.md §3).
WORKING_STATES: Final = {"rest": 0, "available": 1, "work": 2, "drive": 3}
#: DI is repeated this often even when no card changed (ms).
DI_EVERY_MS: Final = 10_000


@dataclass
class _Slot:
    card: str | None = None
    activity: str = "rest"


@dataclass
class FmsBus:
    """The FMS messages of one bus, built tick by tick from its state; no I/O, no clock."""

    start_ms: int
    tco1_hz: int = 20
    odometer_m: float = 0.0
    kmh: float = 0.0
    slots: list[_Slot] = field(default_factory=lambda: [_Slot(), _Slot()])
    doors: dict[int, bool] = field(default_factory=lambda: {1: False, 2: False})
    performance_event: bool = False
    powered: bool = True
    #: Console entries a registrador would have sent (trip, incident), for the operator.
    console: list[dict[str, Any]] = field(default_factory=list)
    #: Device ms until which the bus carries no frame (a silent spell), or None.
    silent_until_ms: int | None = None

    def __post_init__(self) -> None:
        if self.tco1_hz not in TCO1_RATES:
            raise ValueError(f"TCO1 rate {self.tco1_hz} Hz is not one of {TCO1_RATES}")
        self.period_ms = 1000 // self.tco1_hz
        self.next_tick_ms = -(-self.start_ms // self.period_ms) * self.period_ms
        self._last_tick_ms = self.start_ms
        self._di_sent: tuple[str | None, str | None] | None = None
        self._di_at = -DI_EVERY_MS
        self._pending: list[tuple[int, str, CanFrame]] = []

    # --- frames -----------------------------------------------------------------------------

    def frames_until(self, now_ms: int) -> list[tuple[int, str, CanFrame]]:
        """(device ms, message name, frame) of every tick up to ``now_ms``, in bus order."""
        self._catch_up(now_ms)
        out, self._pending = self._pending, []
        return out

    def _catch_up(self, now_ms: int) -> None:
        """Build every tick at or before ``now_ms`` (a change made at a device time is in the
        frames of that time on: the setters catch up to the millisecond before)."""
        while self.next_tick_ms <= now_ms:
            at = self.next_tick_ms
            self.odometer_m += self.kmh / 3.6 * (at - self._last_tick_ms) / 1000
            self._last_tick_ms = at
            self.next_tick_ms += self.period_ms
            if not self.powered or (self.silent_until_ms is not None and at < self.silent_until_ms):
                continue
            if at % 1000 == 0:
                self._pending.append((at, "TD", encode_td(at)))
                ids = (self.slots[0].card, self.slots[1].card)
                if ids != self._di_sent or at - self._di_at >= DI_EVERY_MS:
                    self._di_sent, self._di_at = ids, at
                    self._pending += [(at, "DI", f) for f in encode_di(*ids)]
                self._pending.append((at, "VDHR", encode_vdhr(int(self.odometer_m))))
                self._pending.append((at, "DC2", encode_dc2(self.doors.get(1), self.doors.get(2))))
            self._pending.append((at, "TCO1", encode_tco1(self._tco1())))

    def _tco1(self) -> Tco1:
        one, two = self.slots
        return Tco1(
            Driver1WorkingState=WORKING_STATES.get(one.activity, 7),
            Driver2WorkingState=WORKING_STATES.get(two.activity, 7),
            VehicleMotion=1 if self.kmh > 0 else 0,
            Driver1Card=int(one.card is not None),
            Driver2Card=int(two.card is not None),
            TachographPerformance=int(self.performance_event),
            TachographVehicleSpeed=speed_code(min(self.kmh, 250.0)),
        )

    # --- what drivers, workshops and scenarios do (RegistradorModel's methods) ---------------

    def set_speed(self, kmh: float, now_ms: int) -> None:
        """The vehicle's speed from ``now_ms`` on (the odometer integrates it)."""
        self._catch_up(now_ms - 1)
        self.kmh = max(0.0, min(kmh, 250.0))

    def set_ignition(self, on: bool, now_ms: int) -> None:
        """Ignition: not a TCO1 signal (the bus keeps talking while the tachograph is powered)."""
        self._catch_up(now_ms - 1)

    def insert_card(self, slot: int, card: str, activity: str, now_ms: int) -> None:
        """A driver inserts a card: TCO1 says a card is present, DI carries its identification."""
        self._catch_up(now_ms - 1)
        self.slots[slot - 1] = _Slot(card, activity)

    def withdraw_card(self, slot: int, now_ms: int) -> None:
        """The card in slot 1 or 2 is taken out."""
        self._catch_up(now_ms - 1)
        self.slots[slot - 1] = _Slot()

    def set_activity(self, slot: int, activity: str, now_ms: int) -> None:
        """The driver in a slot declares an activity (TCO1's working state)."""
        self._catch_up(now_ms - 1)
        current = self.slots[slot - 1]
        if current.card is not None:
            self.slots[slot - 1] = replace(current, activity=activity)

    def device_event(self, event: str, now_ms: int, *, code: int = 0, value: int = 0) -> None:
        """``fault``/``fault_cleared`` set TCO1's tachograph performance event; others (tamper,
        compartment, clock set) have no FMS signal and are not sent."""
        self._catch_up(now_ms - 1)
        if event in ("fault", "fault_cleared"):
            self.performance_event = event == "fault"

    def set_door(self, door: int, is_open: bool, now_ms: int) -> None:
        """A door opens or closes (DC2 carries doors 1 and 2)."""
        self._catch_up(now_ms - 1)
        if door in self.doors:
            self.doors[door] = is_open

    def trip(self, event: str, trip: str, line: str, now_ms: int,
             scheduled_ms: int | None = None) -> None:
        """A trip keyed on a console: not on the FMS bus; kept for the operator."""
        self.console.append({"kind": "trip", "ms": now_ms, "event": event, "trip": trip,
                             "line": line, "scheduled_ms": scheduled_ms})

    def incident(self, cause: str, carrier_fault: bool | None, now_ms: int) -> None:
        """An incident keyed on a console: not on the FMS bus; kept for the operator."""
        self.console.append({"kind": "incident", "ms": now_ms, "cause": cause,
                             "carrier_fault": carrier_fault})

    def power_off(self, now_ms: int) -> None:
        """The tachograph loses power: the bus falls silent."""
        self._catch_up(now_ms - 1)
        self.powered = False

    def power_on(self, now_ms: int) -> None:
        """Power is back: frames again from the next tick."""
        self._catch_up(now_ms - 1)
        self.powered = True


class SlcanAdapter:
    """A serial CAN adapter (SLCAN) on the bus, as the runner's device model."""

    name = "fms"

    def __init__(self, bus: FmsBus, *, timestamps: bool = False) -> None:
        self.bus = bus
        self.timestamps = timestamps
        self.channel: str | None = None
        """None while closed; ``"O"`` (normal) or ``"L"`` (listen-only) once opened."""
        self.commands: list[str] = []
        self.transmit_attempts = 0
        self._inbox = b""

    def next_due_ms(self) -> int | None:
        """Device time of the bus's next tick."""
        return self.bus.next_tick_ms

    def due(self, now_ms: int) -> list[Emission]:
        """The bus's frames up to ``now_ms`` as SLCAN lines (dropped while the channel is closed,
        as an adapter forwards nothing before ``O`` or ``L``)."""
        frames = self.bus.frames_until(now_ms)
        if self.channel is None:
            return []
        return [Emission(slcan.encode_frame(f, timestamp_ms=ms if self.timestamps else None),
                         f"{name} {ms}") for ms, name, f in frames]

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """The host's commands, one per CR, answered CR (OK) or BEL (error)."""
        self._inbox += data
        *lines, self._inbox = self._inbox.split(b"\r")
        self._inbox = self._inbox[-64:]
        out = []
        for line in lines:
            text = line.decode("ascii", "replace")
            out.append(Emission(self._command(text), f"answer {text[:1]}"))
        return out

    def _command(self, text: str) -> bytes:
        self.commands.append(text)
        ok, error = b"\r", b"\x07"
        if not text:
            return ok
        head = text[0]
        if head in "OL":
            if self.channel is not None:
                return error
            self.channel = head
            return ok
        if head == "C":
            self.channel = None
            return ok
        if head in "tTrR":
            if self.channel != "O":
                self.transmit_attempts += 1
                return error
            return b"z\r" if head in "tr" else b"Z\r"
        if head == "S" and text[1:] in {str(n) for n in range(9)} and self.channel is None:
            return ok
        if head == "V":
            return b"V1013\r"
        if head == "N":
            return b"NFROT\r"
        if head == "Z" and text[1:] in ("0", "1") and self.channel is None:
            self.timestamps = text[1:] == "1"
            return ok
        return error


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim fms``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fms",
        help="a bus's FMS CAN traffic as an SLCAN adapter on a pty (tachograph, doors)",
        description="A serial CAN adapter (SLCAN, like a CANable) on a pseudo-terminal, on a "
        "bus whose tachograph and body controller broadcast FMS messages "
        "(firmware-notes/fms.md): TCO1 at --tco1-hz, TD, DI, VDHR and DC2 every second, "
        "playing the same drive as 'frota sim registrador'. The adapter forwards frames once "
        "the host opens the channel (O, or L for listen-only as the agent does) and refuses "
        "to transmit in listen-only mode. Prints the tty path on stdout.",
    )
    parser.add_argument("--tco1-hz", type=int, default=20, choices=TCO1_RATES, metavar="HZ",
                        help="TCO1 frames per second of device time: 1, 2, 5, 10 or 20 (default 20)")
    parser.add_argument("--odometer-km", type=float, default=0.0, metavar="KM",
                        help="the vehicle's distance at the start (default 0)")
    parser.add_argument("--silent-every", type=float, default=0.0, metavar="SECONDS",
                        help="the bus falls silent (no frame, the adapter still there) after "
                        "this many device seconds (default 0 = never)")
    parser.add_argument("--silent-for", type=float, default=10.0, metavar="SECONDS",
                        help="length of each silent spell (default 10)")
    parser.add_argument("--idle", action="store_true",
                        help="no drive: a parked bus (speed 0, no cards), frames only")
    add_line_arguments(parser, baud=0)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``frota sim fms``: the adapter on a pty until interrupted or --duration."""
    if args.odometer_km < 0 or args.silent_every < 0 or args.silent_for <= 0:
        raise UserError("--odometer-km and --silent-every must be >= 0, --silent-for > 0")
    buses: list[FmsBus] = []
    drives: list[DefaultDrive] = []

    def factory(clock: ScaledClock) -> SlcanAdapter:
        start = clock.now_ms()
        bus = FmsBus(start, tco1_hz=args.tco1_hz, odometer_m=args.odometer_km * 1000)
        buses.append(bus)
        if not args.idle:
            drives.append(DefaultDrive(bus, start))
        return SlcanAdapter(bus)

    def on_step(now_ms: int) -> None:
        for drive in drives:
            drive.step(now_ms)
        for bus in buses:
            _silence(bus, now_ms, args.silent_every, args.silent_for)

    return serve(args, factory, on_step)


def _silence(bus: FmsBus, now_ms: int, every_s: float, for_s: float) -> None:
    """Schedule the bus's silent spells: ``for_s`` seconds after every ``every_s`` seconds."""
    if every_s <= 0:
        return
    cycle = int((every_s + for_s) * 1000)
    into = (now_ms - bus.start_ms) % cycle
    if into >= every_s * 1000:
        bus.silent_until_ms = now_ms - into + cycle
