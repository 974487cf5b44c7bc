"""Early warnings (severity ``notice``, ``details.early: true``): a driver still driving (or on
duty) who will reach the continuous-driving (CTB 67-C caput) or workday (CLT 235-C) limit within
``warn_before_min``. Not violations: judged at ``as_of`` only, on the states of the running
segment, so they show in the live findings and disappear once the driver stops in time (or the
limit is passed and the infraction takes over). Their id differs from the infraction's.
"""

from __future__ import annotations

from typing import Any

from collector.rules.context import Ctx
from collector.rules.driver_time import (
    CONTINUOUS,
    WORKDAY,
    ContinuousState,
    WorkdayState,
)
from collector.rules.finding import Finding, build, minutes
from collector.rules.params import ContinuousDrivingParams, WorkdayParams
from protocols.records import ms_to_ts

MINUTE = 60_000
NOTICE = "notice"


def _notice(rule: str, ctx: Ctx, driver: str, start: int, details: dict[str, Any]) -> Finding:
    vehicle, trip, line, profile = ctx
    found = build(profile.rules[rule], profile, subject=f"{driver}:early", vehicle=vehicle,
                  driver=driver, trip=trip, line=line, start_ms=start, end_ms=None,
                  details={**details, "early": True, "open": True})
    found["severity"] = NOTICE
    return found


def continuous_notice(st: ContinuousState, driver: str, as_of: int, ctx: Ctx) -> Finding | None:
    """Driving now, and the continuous-driving limit less than ``warn_before_min`` away."""
    if st.start is None or st.exceeded_at is not None or st.period is None:
        return None
    limit = st.period.continuous_driving_ms
    if limit is None:
        return None
    params: ContinuousDrivingParams = ctx[3].rules[CONTINUOUS].params
    left = limit - st.drive_ms
    if left > params.warn_before_min * MINUTE:
        return None
    return _notice(CONTINUOUS, ctx, driver, st.start, {
        "driving_min": minutes(st.drive_ms), "limit_min": minutes(limit),
        "reached_at": ms_to_ts(as_of + left), "warn_before_min": params.warn_before_min,
        "period": st.period.law,
    })


def workday_notice(st: WorkdayState, driver: str, as_of: int, ctx: Ctx) -> Finding | None:
    """On duty now, and the workday limit (``normal_h`` + ``overtime_h``) less than
    ``warn_before_min`` away."""
    if st.start is None or st.exceeded_at is not None:
        return None
    params: WorkdayParams = ctx[3].rules[WORKDAY].params
    limit = round((params.normal_h + params.overtime_h) * 3_600_000)
    left = limit - st.work_ms
    if left > params.warn_before_min * MINUTE:
        return None
    return _notice(WORKDAY, ctx, driver, st.start, {
        "worked_min": minutes(st.work_ms), "limit_min": minutes(limit),
        "reached_at": ms_to_ts(as_of + left), "warn_before_min": params.warn_before_min,
    })
