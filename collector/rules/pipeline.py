"""The rule pipeline: thin handlers over the pure rule functions, in one explicit order.

A handler says what it listens to and keeps its state where the engine gives it a place:

- vehicle rules (``VEHICLE_RULES``): ``on_sample`` (every speed sample, the hot path — keep it
  tiny), ``on_change`` (moving started/stopped, a slot changed, a trip started or ended),
  ``open`` (episodes still running at ``as_of``);
- trip rules (``TRIP_RULES``): state per trip, following it to a replacement vehicle;
- driver rules (``DRIVER_RULES``): ``on_segment`` for each interval of one effective activity of
  a driver, across vehicles.

Part 2 (trips, interruptions, schedules, occupancy, stops, equipment) lives in
``collector/rules/operations.py``: the engine calls its hooks (``operations.RULES`` lists its rules).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from collector.rules import crew, driver_time, speed
from collector.rules.context import Trip, Vehicle
from collector.rules.finding import Finding

Ctx = driver_time.Ctx


class SpeedRule:
    """``speed.over_limit`` (CTB 61, 218)."""

    id: ClassVar[str] = speed.RULE

    def new_state(self) -> speed.SpeedState:
        """A vehicle's empty state."""
        return speed.SpeedState()

    def on_sample(self, st: speed.SpeedState, v: Vehicle, ms: int, kmh: float,
                  gap_ms: int) -> Finding | None:
        """One speed sample at the vehicle's current limit."""
        params = v.profile.rules[speed.RULE].params
        closed = speed.update(st, ms, kmh, v.limit_kmh, v.limit_source, params, gap_ms)
        found = speed.finding(st, closed, st.ctx[3].rules[speed.RULE].params) \
            if closed is not None and st.ctx is not None else None
        if st.start == ms:
            st.ctx = v.context()
            st.driver = v.slot_driver[1]
        return found

    def on_change(self, st: speed.SpeedState, v: Vehicle, ms: int) -> Finding | None:
        """Nothing: speed episodes follow samples only."""
        return None

    def open(self, st: speed.SpeedState, v: Vehicle, as_of: int) -> Finding | None:
        """The episode still above the limit at the end of the data."""
        episode = speed.open_episode(st)
        if episode is None or st.ctx is None:
            return None
        return speed.finding(st, episode, st.ctx[3].rules[speed.RULE].params)


class UnidentifiedRule:
    """``driver.unidentified`` (CONTRAN 938/2022 art. 3 VI)."""

    id: ClassVar[str] = crew.UNIDENTIFIED

    def new_state(self) -> crew.UnidentifiedState:
        """A vehicle's empty state."""
        return crew.UnidentifiedState()

    def on_change(self, st: crew.UnidentifiedState, v: Vehicle, ms: int) -> Finding | None:
        """Moving or slot 1 changed."""
        return crew.unidentified_change(st, v, ms)

    def open(self, st: crew.UnidentifiedState, v: Vehicle, as_of: int) -> Finding | None:
        """The episode at ``as_of``."""
        return crew.unidentified_open(copy.copy(st), as_of)


class TwoDriversRule:
    """``driver.two_drivers`` (Decreto BA 4.342/1995 art. 86 §3), per trip."""

    id: ClassVar[str] = crew.TWO_DRIVERS

    def new_state(self) -> crew.TwoDriversState:
        """A trip's empty state."""
        return crew.TwoDriversState()

    def on_change(self, st: crew.TwoDriversState, trip: Trip, v: Vehicle,
                  ms: int) -> Finding | None:
        """The trip's vehicle moved, stopped or changed drivers."""
        crew.two_drivers_change(st, trip, v, ms)
        return None

    def on_leave(self, st: crew.TwoDriversState, trip: Trip, ms: int) -> None:
        """The trip's vehicle left the trip (a replacement vehicle continues it)."""
        crew.two_drivers_leave(st, trip, ms)

    def on_end(self, st: crew.TwoDriversState, trip: Trip, ms: int) -> Finding | None:
        """The trip ended."""
        crew.two_drivers_leave(st, trip, ms)
        return crew.two_drivers_finding(st, trip, ms)

    def open(self, st: crew.TwoDriversState, trip: Trip, as_of: int) -> Finding | None:
        """A trip still running at ``as_of``, judged so far."""
        mine = copy.copy(st)
        mine.drivers = set(st.drivers)
        crew.two_drivers_leave(mine, trip, as_of)
        return crew.two_drivers_finding(mine, trip, None)


class DriverRules:
    """The four driver-time rules over one driver's segments."""

    ids: ClassVar[tuple[str, ...]] = (driver_time.CONTINUOUS, driver_time.BREAK_4H,
                                      driver_time.WORKDAY, driver_time.DAILY_REST)

    def new_state(self) -> list[Any]:
        """A driver's empty states, in ``ids`` order."""
        return [driver_time.ContinuousState(), driver_time.BreakState(),
                driver_time.WorkdayState(), driver_time.DailyRestState()]

    def on_segment(self, states: list[Any], driver: str, s: int, e: int, act: str,
                   ctx: Ctx) -> list[Finding]:
        """One interval of one activity."""
        period_of = ctx[3].period_at
        found: list[Finding] = []
        one = driver_time.continuous_segment(states[0], driver, s, e, act, ctx, period_of)
        if one is not None:
            found.append(one)
        one = driver_time.break_segment(states[1], driver, s, e, act, ctx, period_of)
        if one is not None:
            found.append(one)
        one = driver_time.workday_segment(states[2], driver, s, e, act, ctx)
        if one is not None:
            found.append(one)
        found.extend(driver_time.daily_segment(states[3], driver, s, e, act, ctx, period_of))
        return found

    def open(self, states: list[Any], driver: str, since: int, as_of: int, act: str,
             ctx: Ctx) -> list[Finding]:
        """Findings at ``as_of``: the running segment is closed on copies of the states."""
        mine = [copy.copy(st) for st in states]
        daily: driver_time.DailyRestState = mine[3]
        daily.rests = list(daily.rests)
        daily.windows = list(daily.windows)
        found: list[Finding] = []
        if as_of > since:
            found.extend(self.on_segment(mine, driver, since, as_of, act, ctx))
        for one in (driver_time.continuous_open(mine[0], driver),
                    driver_time.break_open(mine[1], driver),
                    driver_time.workday_open(mine[2], driver)):
            if one is not None:
                found.append(one)
        found.extend(driver_time.daily_open(daily, driver, as_of, ctx))
        return found


#: The pipeline, in evaluation order. Part 2 appends its handlers here.
VEHICLE_RULES: tuple[Any, ...] = (SpeedRule(), UnidentifiedRule())
TRIP_RULES: tuple[Any, ...] = (TwoDriversRule(),)
DRIVER_RULES = DriverRules()
