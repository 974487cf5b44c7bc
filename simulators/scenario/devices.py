"""The three devices of a scenario as runner device models, fed second by second from one timeline.

Each model follows :class:`simulators.runner.DeviceModel` and builds its bytes with the
project's encoders, so the frames are the ones the decoders parse:

- the registrador (``protocols.registrador.encoder``): a status frame every second (speed,
  odometer, ignition, both slots), then the driver, console and device events of that second;
- the GPS: an RMC and a GGA sentence every second (NMEA 0183, checksum by
  ``protocols.nmea.checksum``), at the registrador's speed along the route;
- the door counters (``protocols.apc.frames``): one sensor per door at address = door number,
  answering READ_COUNTS with cumulative in/out counters that grow one passenger at a time while
  the door is open. They have no clock.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from protocols.apc import frames as apc
from protocols.nmea import KNOT_KMH, checksum
from protocols.registrador import encoder as reg
from simulators.runner import Emission
from simulators.scenario.render import COURSE_MIN_MS
from simulators.scenario.timeline import Timeline

log = logging.getLogger(__name__)

#: Registrador device events for the canonical statuses a scenario may list, and the status
#: flag each one raises (kept raised in the following status frames).
_REGISTRADOR_EVENTS = {
    "fault": ("fault", "fault"),
    "tamper": ("tamper", "tamper"),
    "compartment_open": ("compartment_opened", "compartment_open"),
    "power_loss": ("power_loss", None),
    "power_restored": ("power_restored", None),
}


class _Seconds:
    """Which scenario seconds a model has already produced."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.next_s = 0

    def next_due_ms(self) -> int | None:
        if self.next_s > self.tl.duration_s:
            return None
        return self.tl.ms(self.next_s)

    def upto(self, now_ms: int) -> range:
        last = min((now_ms - self.tl.scenario.start_ms) // 1000, self.tl.duration_s)
        seconds = range(self.next_s, last + 1)
        self.next_s = max(self.next_s, last + 1)
        return seconds


class RegistradorScript:
    """The registrador playing a timeline: status at 1 Hz plus the events of each second."""

    name = "registrador"

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.clock = _Seconds(tl)
        self.seq = 0
        self.slots = {1: reg.Slot(), 2: reg.Slot()}
        self.flags = {"compartment_open": False, "tamper": False, "fault": False}
        self._events = sorted(tl.events, key=lambda e: e.t_s)
        self._k = 0

    def next_due_ms(self) -> int | None:
        """Device time of the next status frame."""
        return self.clock.next_due_ms()

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def due(self, now_ms: int) -> list[Emission]:
        """Status frames and events for every second up to ``now_ms``."""
        out: list[Emission] = []
        tl = self.tl
        for t in self.clock.upto(now_ms):
            ms = tl.ms(t)
            seq = self._next_seq()
            out.append(Emission(reg.encode_status(
                seq, ms, kmh=round(tl.speed_ms[t] * 3.6, 2), odometer_m=tl.odometer_m(t),
                ignition=True, slot1=self.slots[1], slot2=self.slots[2], **self.flags,
            ), seq))
            while self._k < len(self._events) and self._events[self._k].t_s <= t:
                frame = self._event_frame(self._events[self._k].kind,
                                          self._events[self._k].fields, ms)
                if frame is not None:
                    out.append(Emission(frame, self.seq))
                self._k += 1
        return out

    def _event_frame(self, kind: str, fields: dict[str, object], ms: int) -> bytes | None:
        if kind == "driver":
            slot = int(str(fields["slot"]))
            card = fields["driver"]
            before = self.slots[slot]
            if card is None and before.card is None:
                return None  # the slots as the first status frame reports them: nothing to do
            if card is None:  # the event carries the slot after it: empty
                self.slots[slot] = reg.Slot()
                return reg.encode_driver_event(self._next_seq(), ms, slot=slot, event="card_out",
                                               state=reg.Slot())
            state = reg.Slot(str(card), str(fields["activity"]))
            self.slots[slot] = state
            event = "activity" if before.card == card else "card_in"
            return reg.encode_driver_event(self._next_seq(), ms, slot=slot, event=event,
                                           state=state)
        if kind == "trip":
            scheduled = fields.get("scheduled")
            return reg.encode_trip(self._next_seq(), ms, event=str(fields["event"]),
                                   trip=str(fields["trip"]), line=str(fields["line"]),
                                   scheduled_ms=int(str(scheduled)) if scheduled else None)
        if kind == "incident":
            fault = fields.get("carrier_fault")
            return reg.encode_incident(self._next_seq(), ms, cause=str(fields["cause"]),
                                       carrier_fault=None if fault is None else bool(fault))
        if kind == "device" and fields.get("device") == "registrador":
            status = str(fields["status"])
            if status not in _REGISTRADOR_EVENTS:
                log.warning("registrador status %s is not played (no such device event)", status)
                return None
            event, flag = _REGISTRADOR_EVENTS[status]
            if flag is not None:
                self.flags[flag] = True
            return reg.encode_device_event(self._next_seq(), ms, event=event)
        if kind == "device":
            log.warning("%s status %s is not played on the devices", fields.get("device"),
                        fields.get("status"))
        return None  # door events belong to the door counters

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """History requests are not served by the scenario player."""
        return []


def _nmea(body: str) -> bytes:
    return b"$" + body.encode("ascii") + f"*{checksum(body.encode('ascii')):02X}\r\n".encode()


def _angle(value: float, degree_digits: int) -> str:
    minutes = round(abs(value) * 60, 5)
    degrees, minutes = divmod(minutes, 60)
    return f"{int(degrees):0{degree_digits}d}{minutes:08.5f}"


def nmea_fix(ms: int, lat: float, lon: float, kmh: float, course: float | None) -> bytes:
    """One fix epoch as an RMC and a GGA sentence (GPS talker), positions to 1e-5 minute."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    hms = f"{dt:%H%M%S}.{dt.microsecond // 10000:02d}"
    la = f"{_angle(lat, 2)},{'N' if lat >= 0 else 'S'}"
    lo = f"{_angle(lon, 3)},{'E' if lon >= 0 else 'W'}"
    cog = "" if course is None else f"{course:.1f}"
    rmc = f"GPRMC,{hms},A,{la},{lo},{kmh / KNOT_KMH:.2f},{cog},{dt:%d%m%y},,,A"
    gga = f"GPGGA,{hms},{la},{lo},1,09,0.9,760.0,M,-5.6,M,,"
    return _nmea(rmc) + _nmea(gga)


class GpsScript:
    """The GPS playing a timeline: one fix per second at the registrador's speed."""

    name = "gps"

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.clock = _Seconds(tl)

    def next_due_ms(self) -> int | None:
        """Device time of the next fix."""
        return self.clock.next_due_ms()

    def due(self, now_ms: int) -> list[Emission]:
        """The fixes for every second up to ``now_ms``."""
        out = []
        tl = self.tl
        for t in self.clock.upto(now_ms):
            v = tl.speed_ms[t]
            lat, lon, course = tl.route.locate(tl.route_m[t])
            out.append(Emission(nmea_fix(tl.ms(t), lat, lon, round(v * 3.6, 1),
                                         course if v >= COURSE_MIN_MS else None), t))
        return out

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """A GPS takes no input here."""
        return []


class DoorSensors:
    """The door counters on one RS-485 line (address = door number), counting passages."""

    name = "apc"

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        doors = range(1, tl.scenario.doors + 1)
        self.open = dict.fromkeys(doors, False)
        self.entered = dict.fromkeys(doors, 0)
        self.exited = dict.fromkeys(doors, 0)
        # (second, phase, door, what): within a second a door opens, people pass, it closes
        actions: list[tuple[int, int, int, str]] = []
        for e in tl.events:
            if e.kind == "door":
                opened = bool(e.fields["open"])
                actions.append((e.t_s, 0 if opened else 2, int(e.fields["door"]),
                                "open" if opened else "close"))
        for p in tl.passages:
            actions.append((p.t_s, 1, p.door, "in" if p.boarding else "out"))
        actions.sort()
        self._actions = actions
        self._k = 0
        self._buf = bytearray()

    def advance(self, t_s: int) -> None:
        """Apply the door openings, closings and passages up to scenario second ``t_s``."""
        actions = self._actions
        while self._k < len(actions) and actions[self._k][0] <= t_s:
            _, _, door, what = actions[self._k]
            if what in ("open", "close"):
                self.open[door] = what == "open"
            elif what == "in":
                self.entered[door] += 1
            else:
                self.exited[door] += 1
            self._k += 1

    def next_due_ms(self) -> int | None:
        """Door sensors only answer polls."""
        return None

    def due(self, now_ms: int) -> list[Emission]:
        """Nothing spontaneous."""
        return []

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """Answer READ_COUNTS and ACK_RESET addressed to a door; ignore anything else."""
        self._buf += data
        out: list[Emission] = []
        i = 0
        while i < len(self._buf):
            verdict, size, frame = apc.scan(self._buf, i)
            if verdict == "short":
                break
            if frame is None:
                i += 1
                continue
            i += size
            door = frame.address
            if door not in self.open:
                continue
            if frame.command == apc.READ_COUNTS:
                counts = apc.DoorCounts(open=self.open[door], entered=self.entered[door],
                                        exited=self.exited[door])
                out.append(Emission(apc.encode_counts(door, counts), door))
            elif frame.command == apc.ACK_RESET:
                out.append(Emission(apc.encode_ack(door), door))
        del self._buf[:i]
        return out
