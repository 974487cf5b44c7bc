"""The four driver-time rules in the pipeline, over each driver's activity segments."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from collector.rules import driver_time as dt
from collector.rules import early
from collector.rules.context import Whereabouts
from collector.rules.finding import Finding
from collector.rules.params import (
    BreakParams,
    ContinuousDrivingParams,
    DailyRestParams,
    WorkdayParams,
)
from collector.rules.rule import RuleBase, RuleContext


class DriverStates:
    """One driver's states of the four rules."""

    __slots__ = ("brk", "continuous", "daily", "workday")

    def __init__(self) -> None:
        self.continuous = dt.ContinuousState()
        self.brk = dt.BreakState()
        self.workday = dt.WorkdayState()
        self.daily = dt.DailyRestState()

    def copy(self) -> DriverStates:
        """A copy that judging at ``as_of`` may change freely."""
        mine = DriverStates()
        mine.continuous = copy.copy(self.continuous)
        mine.brk = copy.copy(self.brk)
        mine.workday = copy.copy(self.workday)
        mine.daily = copy.copy(self.daily)
        mine.daily.rests = list(self.daily.rests)
        mine.daily.windows = list(self.daily.windows)
        return mine


def _segment(st: DriverStates, driver: str, s: int, e: int, act: str,
             ctx: Whereabouts) -> list[Finding]:
    period_of = ctx.at(s)[3].period_at
    found: list[Finding] = []
    one = dt.continuous_segment(st.continuous, driver, s, e, act, ctx, period_of)
    if one is not None:
        found.append(one)
    one = dt.break_segment(st.brk, driver, s, e, act, ctx, period_of)
    if one is not None:
        found.append(one)
    one = dt.workday_segment(st.workday, driver, s, e, act, ctx)
    if one is not None:
        found.append(one)
    found.extend(dt.daily_segment(st.daily, driver, s, e, act, ctx, period_of))
    return found


class DriverTime(RuleBase):
    """``driver.continuous_driving``, ``driver.break_per_4h``, ``driver.workday`` and
    ``driver.daily_rest`` (CTB 67-C, CLT 235-C), with their early warnings (``early.py``)."""

    params = (
        (dt.CONTINUOUS, ContinuousDrivingParams),
        (dt.BREAK_4H, BreakParams),
        (dt.DAILY_REST, DailyRestParams),
        (dt.WORKDAY, WorkdayParams),
    )
    order = 40

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self.states: dict[str, DriverStates] = {}

    def on_segment(self, driver: str, s: int, e: int, act: str,
                   ctx: Whereabouts) -> list[Finding]:
        """One interval of one activity."""
        st = self.states.get(driver)
        if st is None:
            st = self.states[driver] = DriverStates()
        return _segment(st, driver, s, e, act, ctx)

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """Findings at ``as_of``: each driver's running segment closed on copies of the states."""
        for d in self.ctx.drivers.values():
            if d.act is None or d.vehicle is None:
                continue
            known = self.states.get(d.id)
            mine = known.copy() if known is not None else DriverStates()
            ctx = Whereabouts(d.where or [(d.since, d.vehicle.context())])
            if as_of > d.since:
                yield from _segment(mine, d.id, d.since, as_of, d.act, ctx)
            yield dt.continuous_open(mine.continuous, d.id)
            yield dt.break_open(mine.brk, d.id)
            yield dt.workday_open(mine.workday, d.id)
            yield from dt.daily_open(mine.daily, d.id, as_of, ctx)
            if d.act == "drive":
                yield early.continuous_notice(mine.continuous, d.id, as_of, ctx.last)
            if d.act != "rest":
                yield early.workday_notice(mine.workday, d.id, as_of, ctx.last)


RULE = DriverTime
