"""``speed.over_limit``: one finding per continuous episode above the applicable limit (CTB 61, 218).

The pure part is :func:`update`, called on every speed sample of a vehicle with the limit in force
at that sample; it returns the episode that the sample closed, if any. The engine calls it with
the registrador's speed (the GPS speed while the registrador is silent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.rules.finding import Finding, build
from collector.rules.params import SpeedParams
from collector.rules.profile import Profile

RULE = "speed.over_limit"

Ctx = tuple[str, str | None, str | None, Profile]


class SpeedState:
    """An episode in progress (``start`` None when the vehicle is within the limit)."""

    __slots__ = ("ctx", "dist_m", "driver", "last_kmh", "last_ms", "limit", "limit_source",
                 "peak", "peak_considered", "start")

    def __init__(self) -> None:
        self.start: int | None = None
        self.last_ms = 0
        self.last_kmh = 0.0
        self.peak = 0.0
        self.peak_considered = 0.0
        self.limit = 0.0
        self.limit_source = ""
        self.dist_m = 0.0
        self.driver: str | None = None
        self.ctx: Ctx | None = None


@dataclass(frozen=True)
class Episode:
    """A closed (or, at ``as_of``, open) episode above the limit."""

    start_ms: int
    end_ms: int
    peak_kmh: float
    considered_kmh: float
    limit_kmh: float
    limit_source: str
    distance_m: float
    is_open: bool


def considered(kmh: float, tolerance: bool) -> float:
    """The speed judged: with the enforcement tolerance, −7 km/h up to 100 km/h, −7 % above."""
    if not tolerance:
        return kmh
    return kmh - 7.0 if kmh <= 100.0 else kmh * 0.93


def grade(speed: float, limit: float) -> str:
    """CTB 218: up to 20 % over = média, over 20 % up to 50 % = grave, over 50 % = gravíssima."""
    if speed * 100 <= limit * 120:
        return "média"
    if speed * 100 <= limit * 150:
        return "grave"
    return "gravíssima"


def _close(st: SpeedState, end_ms: int, is_open: bool) -> Episode:
    assert st.start is not None
    episode = Episode(st.start, end_ms, st.peak, st.peak_considered, st.limit, st.limit_source,
                      st.dist_m, is_open)
    st.start = None
    return episode


def update(st: SpeedState, ms: int, kmh: float, limit: float, limit_source: str,
           params: SpeedParams, gap_ms: int) -> Episode | None:
    """Feed one sample; return the episode it closes (a sample within the limit, or a gap)."""
    closed: Episode | None = None
    if st.start is not None:
        if ms - st.last_ms > gap_ms:
            closed = _close(st, st.last_ms, False)
        else:
            st.dist_m += st.last_kmh * (ms - st.last_ms) / 3600.0
    judged = considered(kmh, params.enforcement_tolerance) if params.enforcement_tolerance else kmh
    if judged > limit:
        if st.start is None:
            st.start = ms
            st.peak, st.peak_considered, st.limit, st.limit_source = kmh, judged, limit, limit_source
            st.dist_m = 0.0
        elif judged * st.limit > st.peak_considered * limit:
            st.peak, st.peak_considered, st.limit, st.limit_source = kmh, judged, limit, limit_source
    elif st.start is not None:
        closed = _close(st, ms, False)
    st.last_ms = ms
    st.last_kmh = kmh
    return closed


def open_episode(st: SpeedState) -> Episode | None:
    """The episode still open at the end of the data (it ends at its last sample so far)."""
    if st.start is None:
        return None
    return Episode(st.start, st.last_ms, st.peak, st.peak_considered, st.limit, st.limit_source,
                   st.dist_m, True)


def finding(st: SpeedState, episode: Episode, params: SpeedParams) -> Finding | None:
    """The finding for an episode that lasted at least ``min_duration_s``; None otherwise."""
    duration = episode.end_ms - episode.start_ms
    if duration < params.min_duration_s * 1000 or st.ctx is None:
        return None
    vehicle, trip, line, profile = st.ctx
    cfg = profile.rules[RULE]
    details: dict[str, Any] = {
        "peak_kmh": round(episode.peak_kmh, 1),
        "limit_kmh": round(episode.limit_kmh, 1),
        "limit_source": episode.limit_source,
        "excess_pct": round((episode.considered_kmh / episode.limit_kmh - 1) * 100, 1),
        "grade": grade(episode.considered_kmh, episode.limit_kmh),
        "duration_s": round(duration / 1000, 1),
        "distance_m": round(episode.distance_m),
        "min_duration_s": params.min_duration_s,
        "enforcement_tolerance": params.enforcement_tolerance,
    }
    if params.enforcement_tolerance:
        details["considered_kmh"] = round(episode.considered_kmh, 1)
    if episode.is_open:
        details["open"] = True
    return build(cfg, profile, subject=vehicle, vehicle=vehicle, driver=st.driver, trip=trip,
                 line=line, start_ms=episode.start_ms,
                 end_ms=None if episode.is_open else episode.end_ms, details=details)
