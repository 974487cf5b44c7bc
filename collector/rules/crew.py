"""Who is at the wheel: ``driver.unidentified`` (CONTRAN 938/2022 art. 3 VI) and
``driver.two_drivers`` (Decreto BA 4.342/1995 art. 86 §3).

Both are driven by changes only (the vehicle starts or stops moving, slot 1 changes, a trip starts
or ends), never by every sample, so they cost nothing on the hot path.
"""

from __future__ import annotations

from typing import Any

from collector.rules.context import Trip, Vehicle
from collector.rules.finding import Finding, build, minutes
from collector.rules.params import TwoDriversParams, UnidentifiedParams
from collector.rules.profile import Profile
from collector.rules.timeutil import night_overlap_ms, parse_hhmm

UNIDENTIFIED = "driver.unidentified"
TWO_DRIVERS = "driver.two_drivers"

Ctx = tuple[str, str | None, str | None, Profile]


class UnidentifiedState:
    """An episode of slot 1 empty with the vehicle moving."""

    __slots__ = ("ctx", "moving_ms", "run_start", "start", "stop_start")

    def __init__(self) -> None:
        self.start: int | None = None
        self.moving_ms = 0
        self.run_start: int | None = None
        self.stop_start: int | None = None
        self.ctx: Ctx | None = None


def _unidentified_finding(st: UnidentifiedState, end_ms: int | None,
                          moving_ms: int | None = None) -> Finding | None:
    """The episode's finding; ``moving_ms``: its time moving when not ``st.moving_ms``."""
    assert st.start is not None
    assert st.ctx is not None
    vehicle, trip, line, profile = st.ctx
    cfg = profile.rules[UNIDENTIFIED]
    params: UnidentifiedParams = cfg.params
    moving = st.moving_ms if moving_ms is None else moving_ms
    if moving < params.after_s * 1000:
        return None
    details: dict[str, Any] = {
        "moving_s": round(moving / 1000, 1),
        "after_s": params.after_s,
    }
    if end_ms is None:
        details["open"] = True
    return build(cfg, profile, subject=vehicle, vehicle=vehicle, driver=None, trip=trip,
                 line=line, start_ms=st.start, end_ms=end_ms, details=details)


def unidentified_change(st: UnidentifiedState, v: Vehicle, ms: int) -> Finding | None:
    """The vehicle started/stopped moving or slot 1 changed at ``ms`` (``v`` is already updated)."""
    if st.run_start is not None:
        st.moving_ms += ms - st.run_start
        st.run_start = None
    result: Finding | None = None
    empty = v.slot_driver[1] is None
    if st.start is not None:
        params: UnidentifiedParams = v.profile.rules[UNIDENTIFIED].params
        if not empty:
            result = _unidentified_finding(st, ms)
            st.start = None
        elif st.stop_start is not None and ms - st.stop_start >= params.episode_gap_min * 60_000:
            result = _unidentified_finding(st, st.stop_start)
            st.start = None
    if empty and v.moving:
        if st.start is None:
            st.start = ms
            st.moving_ms = 0
            st.ctx = v.context()
        st.run_start = ms
        st.stop_start = None
    elif empty and st.start is not None and st.stop_start is None:
        st.stop_start = ms
    return result


def unidentified_open(st: UnidentifiedState, as_of: int) -> Finding | None:
    """The episode at ``as_of``: closed if the vehicle has been stopped long enough, else open.
    ``st`` is left as it is (the running stretch is counted up to ``as_of`` apart)."""
    if st.start is None or st.ctx is None:
        return None
    moving = st.moving_ms
    if st.run_start is not None:
        moving += max(0, as_of - st.run_start)
    params: UnidentifiedParams = st.ctx[3].rules[UNIDENTIFIED].params
    if st.stop_start is not None and as_of - st.stop_start >= params.episode_gap_min * 60_000:
        return _unidentified_finding(st, st.stop_start, moving)
    return _unidentified_finding(st, None, moving)


class TwoDriversState:
    """Per trip: who drove, how long it moved at night, the longest stop."""

    __slots__ = ("drivers", "longest_stop_ms", "night_ms", "run_start", "stop_start")

    def __init__(self) -> None:
        self.drivers: set[str] = set()
        self.night_ms = 0
        self.longest_stop_ms = 0
        self.run_start: int | None = None
        self.stop_start: int | None = None


def _night(trip: Trip, a: int, b: int) -> int:
    params: TwoDriversParams = trip.profile.rules[TWO_DRIVERS].params
    return night_overlap_ms(a, b, trip.profile.tz, parse_hhmm(params.night_start),
                            parse_hhmm(params.night_end))


def two_drivers_change(st: TwoDriversState, trip: Trip, v: Vehicle, ms: int) -> None:
    """The trip's vehicle started/stopped moving or its slots changed at ``ms``."""
    if v.moving:
        if st.run_start is None:
            if st.stop_start is not None:
                st.longest_stop_ms = max(st.longest_stop_ms, ms - st.stop_start)
                st.stop_start = None
            st.run_start = ms
        driver = v.slot_driver[1]
        if driver is not None:
            st.drivers.add(driver)
    elif st.run_start is not None:
        st.night_ms += _night(trip, st.run_start, ms)
        st.run_start = None
        st.stop_start = ms


def two_drivers_leave(st: TwoDriversState, trip: Trip, ms: int) -> None:
    """The trip's vehicle left it (trip end or a replacement vehicle): close the running part."""
    if st.run_start is not None:
        st.night_ms += _night(trip, st.run_start, ms)
        st.run_start = None
        st.stop_start = ms


def two_drivers_finding(st: TwoDriversState, trip: Trip, end_ms: int | None) -> Finding | None:
    """The verdict for a trip (at its end, or provisional at ``as_of`` with ``end_ms`` None)."""
    cfg = trip.profile.rules[TWO_DRIVERS]
    params: TwoDriversParams = cfg.params
    if trip.line is None or trip.line.length_km <= params.min_length_km:
        return None
    if st.night_ms <= 0 or st.longest_stop_ms >= params.overnight_stop_h * 3_600_000:
        return None
    if len(st.drivers) != 1:
        return None
    (driver,) = st.drivers
    details: dict[str, Any] = {
        "length_km": trip.line.length_km,
        "min_length_km": params.min_length_km,
        "drivers": [driver],
        "night_moving_min": minutes(st.night_ms),
        "night_local": f"{params.night_start}–{params.night_end}",
        "longest_stop_min": minutes(st.longest_stop_ms),
        "overnight_stop_h": params.overnight_stop_h,
    }
    if end_ms is None:
        details["open"] = True
    return build(cfg, trip.profile, subject=trip.id, vehicle=trip.vehicle, driver=driver,
                 trip=trip.id, line=trip.line_id, start_ms=trip.start_ms, end_ms=end_ms,
                 details=details)
