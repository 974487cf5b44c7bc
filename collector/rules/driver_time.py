"""Driver time (CTB 67-C, CLT 235-C): continuous driving, breaks per 4 h, working day, daily rest.

Each rule is a pure function of a small state and one *segment* of a driver's day — an interval
``[s, e)`` with one effective activity (``drive``, ``work``, ``available``, ``rest``) — built by
the engine across vehicles. The limits come from the driver period in force (docs/rules.md); the
vehicle, trip, citations and severity of a finding from where the driver was at the moment it
became true (``Whereabouts.at``): the limit passed, the window's end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from collector.rules.context import Ctx, Whereabouts
from collector.rules.finding import Finding, build, minutes
from collector.rules.params import BreakParams, ContinuousDrivingParams, WorkdayParams
from collector.rules.profile import DriverPeriod
from protocols.records import ms_to_ts

CONTINUOUS = "driver.continuous_driving"
BREAK_4H = "driver.break_per_4h"
WORKDAY = "driver.workday"
DAILY_REST = "driver.daily_rest"



def _driver_finding(rule: str, ctx: Ctx, driver: str, start: int, end: int | None,
                    details: dict[str, Any]) -> Finding | None:
    vehicle, trip, line, profile = ctx
    cfg = profile.rules[rule]
    if end is None:
        details["open"] = True
    return build(cfg, profile, subject=driver, vehicle=vehicle, driver=driver, trip=trip,
                 line=line, start_ms=start, end_ms=end, details=details)


class ContinuousState:
    """Driving since the last break piece."""

    __slots__ = ("ctx", "drive_ms", "exceeded_at", "last_end", "period", "start")

    def __init__(self) -> None:
        self.start: int | None = None
        self.drive_ms = 0
        self.last_end = 0
        self.exceeded_at: int | None = None
        self.period: DriverPeriod | None = None
        self.ctx: Ctx | None = None


def _continuous_result(st: ContinuousState, driver: str, end: int | None) -> Finding | None:
    if st.exceeded_at is None or st.start is None or st.ctx is None or st.period is None:
        return None
    limit = st.period.continuous_driving_ms or 0
    params: ContinuousDrivingParams = st.ctx[3].rules[CONTINUOUS].params
    return _driver_finding(CONTINUOUS, st.ctx, driver, st.start, end, {
        "driving_min": minutes(st.drive_ms),
        "limit_min": minutes(limit),
        "exceeded_at": ms_to_ts(st.exceeded_at),
        "break_piece_min": params.break_piece_min,
        "period": st.period.law,
    })


def continuous_segment(st: ContinuousState, driver: str, s: int, e: int, act: str,
                       where: Whereabouts,
                       period_of: Any) -> Finding | None:
    """CTB 67-C caput: driving beyond the limit without a rest piece of ``break_piece_min``."""
    if act == "drive":
        if st.start is None:
            st.start, st.drive_ms, st.exceeded_at = s, 0, None
            st.period = period_of(s)
        limit = st.period.continuous_driving_ms if st.period is not None else None
        before = st.drive_ms
        st.drive_ms += e - s
        st.last_end = e
        if limit is not None and st.exceeded_at is None and st.drive_ms > limit:
            st.exceeded_at = s + (limit - before)
            st.ctx = where.at(st.exceeded_at)
        return None
    if act == "rest" and st.start is not None:
        params: ContinuousDrivingParams = where.last[3].rules[CONTINUOUS].params
        if e - s >= params.break_piece_min * 60_000:
            result = _continuous_result(st, driver, st.last_end)
            st.start = None
            return result
    return None


def continuous_open(st: ContinuousState, driver: str) -> Finding | None:
    """The driving period still running at ``as_of``."""
    return _continuous_result(st, driver, None) if st.start is not None else None


class BreakState:
    """A 4 h driving block: driving and qualifying breaks accumulated since the last reset."""

    __slots__ = ("break_at_exceed", "break_ms", "ctx", "drive_ms", "exceeded_at", "start")

    def __init__(self) -> None:
        self.start: int | None = None
        self.drive_ms = 0
        self.break_ms = 0
        self.exceeded_at: int | None = None
        self.break_at_exceed = 0
        self.ctx: Ctx | None = None


def _break_result(st: BreakState, driver: str, end: int | None) -> Finding | None:
    if st.exceeded_at is None or st.start is None or st.ctx is None:
        return None
    params: BreakParams = st.ctx[3].rules[BREAK_4H].params
    return _driver_finding(BREAK_4H, st.ctx, driver, st.start, end, {
        "driving_min": minutes(st.drive_ms),
        "drive_block_min": params.drive_block_h * 60,
        "breaks_min_at_block_end": minutes(st.break_at_exceed),
        "break_required_min": params.break_min,
        "break_piece_min": params.break_piece_min,
        "exceeded_at": ms_to_ts(st.exceeded_at),
    })


def break_segment(st: BreakState, driver: str, s: int, e: int, act: str, where: Whereabouts,
                  period_of: Any) -> Finding | None:
    """CTB 67-C §1-A: 30 min of breaks (pieces ≥ 5 min) before 4 h of accumulated driving."""
    params: BreakParams = where.last[3].rules[BREAK_4H].params
    if act == "drive":
        if st.start is None:
            if not period_of(s).break_rules:
                return None
            st.start, st.drive_ms, st.break_ms, st.exceeded_at = s, 0, 0, None
        block = round(params.drive_block_h * 3_600_000)
        before = st.drive_ms
        st.drive_ms += e - s
        if st.exceeded_at is None and st.drive_ms > block:
            st.exceeded_at = s + (block - before)
            st.break_at_exceed = st.break_ms
            st.ctx = where.at(st.exceeded_at)
        return None
    if act == "rest" and st.start is not None and e - s >= params.break_piece_min * 60_000:
        need = round(params.break_min * 60_000) - st.break_ms
        if e - s >= need:
            result = _break_result(st, driver, s + need)
            st.start = None
            return result
        st.break_ms += e - s
    return None


def break_open(st: BreakState, driver: str) -> Finding | None:
    """The block still short of its breaks at ``as_of``."""
    return _break_result(st, driver, None) if st.start is not None else None


class WorkdayState:
    """A duty: time driving, working or available since the last rest of ``duty_rest_h``."""

    __slots__ = ("ctx", "exceeded_at", "last_end", "start", "work_ms")

    def __init__(self) -> None:
        self.start: int | None = None
        self.work_ms = 0
        self.last_end = 0
        self.exceeded_at: int | None = None
        self.ctx: Ctx | None = None


def _workday_result(st: WorkdayState, driver: str, end: int | None) -> Finding | None:
    if st.exceeded_at is None or st.start is None or st.ctx is None:
        return None
    params: WorkdayParams = st.ctx[3].rules[WORKDAY].params
    return _driver_finding(WORKDAY, st.ctx, driver, st.start, end, {
        "worked_min": minutes(st.work_ms),
        "limit_min": (params.normal_h + params.overtime_h) * 60,
        "normal_h": params.normal_h,
        "overtime_h": params.overtime_h,
        "exceeded_at": ms_to_ts(st.exceeded_at),
    })


def workday_segment(st: WorkdayState, driver: str, s: int, e: int, act: str,
                    where: Whereabouts) -> Finding | None:
    """CLT 235-C: a duty longer than ``normal_h + overtime_h``."""
    params: WorkdayParams = where.last[3].rules[WORKDAY].params
    if act != "rest":
        if st.start is None:
            st.start, st.work_ms, st.exceeded_at = s, 0, None
        limit = round((params.normal_h + params.overtime_h) * 3_600_000)
        before = st.work_ms
        st.work_ms += e - s
        st.last_end = e
        if st.exceeded_at is None and st.work_ms > limit:
            st.exceeded_at = s + (limit - before)
            st.ctx = where.at(st.exceeded_at)
        return None
    if st.start is not None and e - s >= params.duty_rest_h * 3_600_000:
        result = _workday_result(st, driver, st.last_end)
        st.start = None
        return result
    return None


def workday_open(st: WorkdayState, driver: str) -> Finding | None:
    """The duty still running at ``as_of``."""
    return _workday_result(st, driver, None) if st.start is not None else None


@dataclass(frozen=True)
class Window:
    """A 24 h window from a duty start, and — once certain — when its rest became impossible."""

    start: int
    end: int
    period: DriverPeriod
    #: (the instant the rest became impossible, where the driver was then)
    impossible: tuple[int, Ctx] | None = None


class DailyRestState:
    """24 h windows opened at duty starts, and the rest pieces that may fill them."""

    __slots__ = ("in_duty", "latest_end", "rests", "windows")

    def __init__(self) -> None:
        self.in_duty = False
        #: windows not decided yet
        self.windows: list[Window] = []
        self.latest_end: int | None = None
        self.rests: list[tuple[int, int]] = []


DAY_MS = 86_400_000


def _judge(window: Window, rests: list[tuple[int, int]],
           now: int) -> tuple[bool | None, dict[str, Any]]:
    """(True ok / False violated / None undecided, details) for a window given rests up to now."""
    w0, w1, period = window.start, window.end, window.period
    need = period.daily_rest_ms or 0
    clipped = [(max(s, w0), min(e, w1)) for s, e in rests if e > w0 and s < w1]
    lengths = sorted((e - s for s, e in clipped), reverse=True)
    longest = lengths[0] if lengths else 0
    details: dict[str, Any] = {
        "window_start": ms_to_ts(w0),
        "window_end": ms_to_ts(w1),
        "longest_rest_min": minutes(longest),
        "rest_required_min": minutes(need),
        "rests": [[ms_to_ts(s), ms_to_ts(e)] for s, e in clipped],
        "period": period.law,
    }
    if longest >= need:
        return True, details
    if now < w1:
        return None, details
    first, second = period.split_first_ms, period.split_second_ms
    if first is not None and second is not None:
        if len(lengths) >= 2 and lengths[0] >= first and lengths[1] >= second:
            return True, details
        details["split"] = f"{minutes(first)} + {minutes(second)} min"
        return False, details
    within = period.split_remainder_within_ms
    if first is not None and within is not None:
        undecided = False
        for s, e in clipped:
            if e - s < first:
                continue
            remainder = need - (e - s)
            later = sum(min(b, e + within) - max(a, e) for a, b in rests
                        if b > e and a < e + within)
            if later >= remainder:
                return True, details
            if now < e + within:
                undecided = True
        details["split"] = f"first ≥ {minutes(first)} min, the rest within {minutes(within)} min"
        return (None if undecided else False), details
    return False, details


def daily_segment(st: DailyRestState, driver: str, s: int, e: int, act: str,
                  where: Whereabouts, period_of: Any) -> list[Finding]:
    """CTB 67-C §3: each 24 h window from a duty start holds the qualifying rest."""
    params: WorkdayParams = where.last[3].rules[WORKDAY].params
    if act == "rest":
        st.rests.append((s, e))
        if e - s >= params.duty_rest_h * 3_600_000:
            st.in_duty = False
    else:
        if not st.in_duty:
            st.in_duty = True
            _open_window(st, s, period_of)
        # a duty that outlasts its window opens the next one where the last one ends
        while st.latest_end is not None and st.latest_end < e:
            _open_window(st, max(s, st.latest_end), period_of)
    return daily_decide(st, driver, e, where)


def _open_window(st: DailyRestState, start: int, period_of: Any) -> None:
    st.windows.append(Window(start, start + DAY_MS, period_of(start)))
    st.latest_end = start + DAY_MS


def impossible_at(window: Window, rests: list[tuple[int, int]]) -> int | None:
    """The instant from which the window's rest can no longer be met, for a rest that may not be
    split: ``end − need``, when the driver is not resting then (resting then, the first instant
    the rest covering it ends). None for periods whose rest may be split (decided at the end)."""
    period = window.period
    need = period.daily_rest_ms
    if need is None or period.split_first_ms is not None or need > window.end - window.start:
        return None
    t = window.end - need
    moved = True
    while moved:
        moved = False
        for s, e in rests:
            if s <= t < e:
                t, moved = e, True
    return t if t < window.end else None


def daily_decide(st: DailyRestState, driver: str, now: int, where: Whereabouts,
                 early: bool = False) -> list[Finding]:
    """Decide every window that can be decided with the rests known up to ``now`` (activity is
    known up to ``now``). A window whose rest became impossible is remembered then, and with
    ``early`` reported at once, open (it closes at the window's end)."""
    results: list[Finding] = []
    keep: list[Window] = []
    for window in st.windows:
        if window.period.daily_rest_ms is None:
            continue  # no daily-rest rule in this period
        verdict, details = _judge(window, st.rests, now)
        if verdict is None:
            if window.impossible is None:
                t = impossible_at(window, st.rests)
                if t is not None and t < now:   # working at t: certain from then on
                    window = replace(window, impossible=(t, where.at(t)))
            keep.append(window)
            if early and window.impossible is not None:
                details["impossible_at"] = ms_to_ts(window.impossible[0])
                found = _driver_finding(DAILY_REST, window.impossible[1], driver, window.start,
                                        None, details)
                if found is not None:
                    results.append(found)
        elif verdict is False:
            # it became true when it became impossible (else at the window's end): the
            # driver's trip and profile then
            if window.impossible is not None:
                details["impossible_at"] = ms_to_ts(window.impossible[0])
                ctx = window.impossible[1]
            else:
                ctx = where.at(window.end)
            found = _driver_finding(DAILY_REST, ctx, driver, window.start, window.end, details)
            if found is not None:
                results.append(found)
    st.windows = keep
    horizon = min((w.start for w in keep), default=now)
    st.rests = [r for r in st.rests if r[1] > horizon]
    return results


def daily_open(st: DailyRestState, driver: str, as_of: int,
               where: Whereabouts) -> list[Finding]:
    """Windows decided at ``as_of`` (the open segment is already among the rests), and those
    already impossible, open."""
    return daily_decide(st, driver, as_of, where, early=True)
