"""The three simulated devices of the project, fed second by second from one scenario timeline.

The tachograph is the registrador on its serial line, or (``tachograph="fms"``) the same
tachograph on the bus's FMS CAN interface, read through an SLCAN adapter
(:mod:`simulators.fms`): TCO1 once per scenario second (a real bus sends 20 Hz; the decoder
writes speed at 1 Hz plus every start and stop either way), TD, DI, VDHR and DC2 (doors 1
and 2) each second. Trips and incidents are not on the FMS bus: they wait in
``FmsBus.console`` for the operator to enter them (:meth:`ScenarioDevices.operator_records`).

The models are the ones ``frota sim registrador|gps|apc`` run (:mod:`simulators.registrador`,
:mod:`simulators.gps`, :mod:`simulators.apc`); the scenario only drives them:

- the registrador gets the second's speed just before its status frame (so frame *t* carries
  the speed of second *t*; its odometer integrates it), then the second's card, activity,
  console and device events;
- the GPS's motion is the timeline's position, speed and course at each whole second;
- the door sensors (address = door number) open, count passengers one at a time and close as
  the timeline says; they have no clock and only answer polls.
"""

from __future__ import annotations

import logging
from typing import Literal

from protocols.records import Record, make_record, ms_to_ts
from simulators.apc import DoorSensor, SensorBus
from simulators.fms import FmsBus, SlcanAdapter
from simulators.gps import GpsFix, GpsReceiver
from simulators.registrador import RegistradorModel
from simulators.scenario.render import COURSE_MIN_MS
from simulators.scenario.timeline import Event, Timeline

log = logging.getLogger(__name__)

#: Canonical registrador statuses a scenario may list → the registrador's device event.
REGISTRADOR_EVENTS = {
    "fault": "fault",
    "tamper": "tamper",
    "compartment_open": "compartment_opened",
    "power_loss": "power_loss",
    "power_restored": "power_restored",
}


class ScenarioDevices:
    """The registrador, GPS and door-sensor models following one timeline."""

    def __init__(self, tl: Timeline, tachograph: Literal["registrador", "fms"] = "registrador") -> None:
        self.tl = tl
        sc = tl.scenario
        self.fms: FmsBus | None = None
        self.adapter: SlcanAdapter | None = None
        #: The tachograph's model, whichever interface it is read on.
        self.tachograph: RegistradorModel | FmsBus
        if tachograph == "fms":
            self.fms = self.tachograph = FmsBus(sc.start_ms, tco1_hz=1, odometer_m=sc.odometer_m)
            self.adapter = SlcanAdapter(self.fms)
        else:
            self.tachograph = RegistradorModel(sc.start_ms, odometer_m=sc.odometer_m)
        # a receiver started 1 ms before the scenario gives its first fix at the first second
        self.gps = GpsReceiver(sc.start_ms - 1, self.fix, vtg=False)
        self.sensors = {d: DoorSensor(address=d) for d in range(1, sc.doors + 1)}
        self.apc = SensorBus(list(self.sensors.values()))
        self._events = sorted((e for e in tl.events if e.kind != "door"), key=lambda e: e.t_s)
        self._e = 0
        # (second, phase, door, action): within a second a door opens, people pass, it closes
        actions: list[tuple[int, int, int, str]] = []
        for e in tl.events:
            if e.kind == "door":
                opened = bool(e.fields["open"])
                actions.append((e.t_s, 0 if opened else 2, int(e.fields["door"]),
                                "open" if opened else "close"))
        actions += [(p.t_s, 1, p.door, "in" if p.boarding else "out") for p in tl.passages]
        self._doors = sorted(actions)
        self._d = 0

    @property
    def registrador(self) -> RegistradorModel:
        """The registrador's model (the scenario played with the tachograph on its serial line)."""
        assert isinstance(self.tachograph, RegistradorModel), "the tachograph is on FMS"
        return self.tachograph

    @property
    def models(self) -> tuple[RegistradorModel | SlcanAdapter, GpsReceiver, SensorBus]:
        """The three device models, for the runner (the tachograph's first)."""
        tachograph = self.adapter if self.adapter is not None else self.registrador
        return tachograph, self.gps, self.apc

    def operator_records(self, vehicle: str) -> list[Record]:
        """The console's trips and incidents an FMS bus did not carry, as the operator enters
        them (``frota collector enter trip|incident``, which adds ``agent: "operator"`` and a seq)."""
        if self.fms is None:
            return []
        out: list[Record] = []
        for entry in self.fms.console:
            ts = ms_to_ts(entry["ms"])
            if entry["kind"] == "trip":
                rec = make_record("trip", vehicle, ts, event=entry["event"], trip=entry["trip"],
                                  line=entry["line"])
                if entry["event"] == "start" and entry["scheduled_ms"] is not None:
                    rec["scheduled"] = ms_to_ts(entry["scheduled_ms"])
                out.append(rec)
            else:
                out.append(make_record("incident", vehicle, ts, cause=entry["cause"],
                                       carrier_fault=entry["carrier_fault"]))
        return out

    def fix(self, now_ms: int) -> GpsFix:
        """The GPS fix at a device time (the timeline's second at or before it)."""
        tl = self.tl
        t = min(max((now_ms - tl.scenario.start_ms) // 1000, 0), tl.duration_s)
        v = tl.speed_ms[t]
        lat, lon, course = tl.route.locate(tl.route_m[t])
        return GpsFix(lat, lon, v * 3.6, course if v >= COURSE_MIN_MS else None)

    def advance(self, t: int) -> None:
        """Set the devices for scenario second ``t`` (call before the runner's step at ``t``)."""
        tl = self.tl
        ms = tl.ms(t)
        self.tachograph.set_speed(tl.speed_ms[t] * 3.6, ms - 1)
        while self._e < len(self._events) and self._events[self._e].t_s <= t:
            self._registrador_event(self._events[self._e], ms)
            self._e += 1
        while self._d < len(self._doors) and self._doors[self._d][0] <= t:
            _, _, door, action = self._doors[self._d]
            sensor = self.sensors[door]
            if action in ("open", "close"):
                sensor.open = action == "open"
                if self.fms is not None:
                    self.fms.set_door(door, sensor.open, ms)
            elif action == "in":
                sensor.board()
            else:
                sensor.alight()
            self._d += 1

    def _registrador_event(self, event: Event, ms: int) -> None:
        reg = self.tachograph
        fields = event.fields
        if event.kind == "driver":
            slot = int(fields["slot"])
            card = fields["driver"]
            current = reg.slots[slot - 1]
            if card is None:
                if current.card is not None:
                    reg.withdraw_card(slot, ms)
            elif current.card == card:
                reg.set_activity(slot, str(fields["activity"]), ms)
            else:
                reg.insert_card(slot, str(card), str(fields["activity"]), ms)
        elif event.kind == "trip":
            reg.trip(str(fields["event"]), str(fields["trip"]), str(fields["line"]), ms,
                     scheduled_ms=fields.get("scheduled"))
        elif event.kind == "incident":
            reg.incident(str(fields["cause"]), fields.get("carrier_fault"), ms)
        elif fields.get("device") == "registrador" and fields["status"] in REGISTRADOR_EVENTS:
            reg.device_event(REGISTRADOR_EVENTS[fields["status"]], ms)
        else:
            log.warning("%s status %s is not played on the devices", fields.get("device"),
                        fields.get("status"))
