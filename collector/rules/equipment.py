"""Per vehicle: ``doors.open_while_moving`` (SP 71 II; TO 70 II) and ``equipment.registrador``
(SP 61 §2; BA 48 §2; TO 66; CTB 230): silent while the GPS moves, faults, tamper, compartment,
power loss, registrador and GPS speeds disagreeing.

Pure functions over small states; :mod:`collector.rules.operations` calls them on door records,
speed samples (only while a door is open), position records and device records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collector.rules.context import Vehicle
from collector.rules.finding import Finding, build, minutes
from collector.rules.params import DoorsParams, RegistradorParams
from collector.rules.profile import Profile

DOORS = "doors.open_while_moving"
REGISTRADOR = "equipment.registrador"

Ctx = tuple[str, str | None, str | None, Profile]

#: device statuses of the registrador that are findings, and the status that ends each
#: (None: an instant event)
STATUS_END: dict[str, tuple[str, ...] | None] = {
    "fault": ("ok",),
    "power_loss": ("power_restored", "ok"),
    "tamper": None,
    "compartment_open": None,
}


@dataclass
class Running:
    """An episode in progress."""

    start_ms: int
    ctx: Ctx
    driver: str | None
    peak: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class EquipmentState:
    """Doors open now, and the running episodes of both rules."""

    __slots__ = ("disagree", "doors", "doors_open", "faults", "gps_since", "silent", "silent_last")

    def __init__(self) -> None:
        self.doors_open: set[int] = set()
        self.doors: Running | None = None
        self.gps_since: int | None = None
        self.silent: Running | None = None
        self.silent_last = 0
        self.disagree: Running | None = None
        self.faults: dict[str, Running] = {}


def _build(rule: str, ep: Running, cause: str | None, end_ms: int | None,
           details: dict[str, Any]) -> Finding | None:
    vehicle, trip, line, profile = ep.ctx
    cfg = profile.rules[rule]
    if end_ms is None:
        details["open"] = True
    subject = vehicle if cause is None else f"{vehicle}:{cause}"
    return build(cfg, profile, subject=subject, vehicle=vehicle, driver=ep.driver, trip=trip,
                 line=line, start_ms=ep.start_ms, end_ms=end_ms, details=details)


# ---- doors -------------------------------------------------------------------------------
def _doors_finding(ep: Running, end_ms: int, is_open: bool) -> Finding | None:
    params: DoorsParams = ep.ctx[3].rules[DOORS].params
    duration = end_ms - ep.start_ms
    if duration < params.min_s * 1000:
        return None
    details = {"doors": sorted(ep.extra["doors"]), "duration_s": round(duration / 1000, 1),
               "peak_kmh": ep.peak, "moving_kmh": params.moving_kmh, "min_s": params.min_s}
    return _build(DOORS, ep, None, None if is_open else end_ms, details)


def doors_update(st: EquipmentState, v: Vehicle, ms: int) -> Finding | None:
    """A door changed or a speed sample arrived while a door is open."""
    params: DoorsParams = v.profile.rules[DOORS].params
    active = bool(st.doors_open) and v.kmh > params.moving_kmh
    ep = st.doors
    if active:
        if ep is None:
            ep = st.doors = Running(ms, v.context(), v.slot_driver[1], v.kmh, {"doors": set()})
        ep.peak = max(ep.peak, v.kmh)
        ep.extra["doors"].update(st.doors_open)
        return None
    if ep is not None:
        st.doors = None
        return _doors_finding(ep, ms, False)
    return None


def doors_open(st: EquipmentState, as_of: int) -> Finding | None:
    """The episode still running at ``as_of``."""
    return None if st.doors is None else _doors_finding(st.doors, as_of, True)


# ---- registrador -------------------------------------------------------------------------
def _silent_finding(ep: Running, end_ms: int, is_open: bool) -> Finding | None:
    params: RegistradorParams = ep.ctx[3].rules[REGISTRADOR].params
    if end_ms - ep.start_ms < params.silent_s * 1000:
        return None
    details = {"cause": "silent", "silent_s": round((end_ms - ep.start_ms) / 1000, 1),
               "after_s": params.silent_s, "moving_gps_kmh": params.moving_gps_kmh,
               "peak_gps_kmh": ep.peak}
    return _build(REGISTRADOR, ep, "silent", None if is_open else end_ms, details)


def _disagree_finding(ep: Running, end_ms: int, is_open: bool) -> Finding | None:
    params: RegistradorParams = ep.ctx[3].rules[REGISTRADOR].params
    if end_ms - ep.start_ms < params.disagree_min * 60_000:
        return None
    details = {"cause": "speed_disagreement", "duration_min": minutes(end_ms - ep.start_ms),
               "max_difference_pct": round(ep.peak, 1), "disagree_pct": params.disagree_pct,
               "disagree_min": params.disagree_min}
    return _build(REGISTRADOR, ep, "speed_disagreement", None if is_open else end_ms, details)


def position(st: EquipmentState, v: Vehicle, ms: int, gps: float) -> list[Finding]:
    """A GPS fix with speed: the registrador silent while the GPS moves; the two speeds apart."""
    params: RegistradorParams = v.profile.rules[REGISTRADOR].params
    out: list[Finding] = []
    moving = gps > params.moving_gps_kmh
    if moving:
        if st.gps_since is None:
            st.gps_since = ms
    else:
        st.gps_since = None
    ep = st.silent
    if ep is not None and (v.speed_ms > ep.start_ms or not moving):
        end = v.speed_ms if v.speed_ms > ep.start_ms else ms
        st.silent = None
        one = _silent_finding(ep, end, False)
        if one is not None:
            out.append(one)
    elif ep is not None:
        ep.peak = max(ep.peak, gps)
    if st.silent is None and st.gps_since is not None:
        anchor = max(v.speed_ms, st.gps_since)
        if ms - anchor >= params.silent_s * 1000 and v.speed_ms < anchor + 1:
            st.silent = Running(anchor, v.context(), v.slot_driver[1], gps)
    fresh = 0 <= ms - v.speed_ms <= 2000
    differs = moving and fresh and abs(v.kmh - gps) * 100 > params.disagree_pct * gps
    ep = st.disagree
    if differs:
        pct = abs(v.kmh - gps) * 100 / gps
        if ep is None:
            st.disagree = Running(ms, v.context(), v.slot_driver[1], pct)
        else:
            ep.peak = max(ep.peak, pct)
    elif ep is not None:
        st.disagree = None
        one = _disagree_finding(ep, ms, False)
        if one is not None:
            out.append(one)
    return out


def device(st: EquipmentState, v: Vehicle, ms: int, status: str,
           detail: str | None) -> list[Finding]:
    """A registrador ``device`` record: faults, tamper, compartment opening, power loss."""
    out: list[Finding] = []
    for cause, ep in list(st.faults.items()):
        ends = STATUS_END[cause]
        if ends is not None and status in ends:
            del st.faults[cause]
            one = _build(REGISTRADOR, ep, cause, ms,
                         {"cause": cause, "detail": ep.extra.get("detail"),
                          "duration_min": minutes(ms - ep.start_ms)})
            if one is not None:
                out.append(one)
    if status not in STATUS_END or status in st.faults:
        return out
    ep = Running(ms, v.context(), v.slot_driver[1], 0.0, {"detail": detail})
    if STATUS_END[status] is None:
        one = _build(REGISTRADOR, ep, status, ms, {"cause": status, "detail": detail})
        if one is not None:
            out.append(one)
    else:
        st.faults[status] = ep
    return out


def registrador_open(st: EquipmentState, v: Vehicle, as_of: int) -> list[Finding]:
    """The registrador episodes still running at ``as_of``."""
    out: list[Finding | None] = []
    if st.silent is not None:
        ep = st.silent
        if v.speed_ms > ep.start_ms:
            out.append(_silent_finding(ep, v.speed_ms, False))
        else:
            out.append(_silent_finding(ep, as_of, True))
    if st.disagree is not None:
        out.append(_disagree_finding(st.disagree, as_of, True))
    for cause, ep in st.faults.items():
        out.append(_build(REGISTRADOR, ep, cause, None,
                          {"cause": cause, "detail": ep.extra.get("detail"),
                           "duration_min": minutes(as_of - ep.start_ms)}))
    return [f for f in out if f is not None]
