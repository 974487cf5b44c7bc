"""The parameters of every rule of docs/rules.md, one frozen dataclass per rule, filled from a profile.

Defaults are the catalogue's (docs/rules.md); a profile file states every value explicitly anyway, so a reader of the
file sees the numbers. Each rule of ``collector/rules/checks/`` names the dataclass of each of its
ids (``params``); a new rule may as well define its dataclass in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SpeedParams:
    """``speed.over_limit``: CTB 61, 218."""

    default_limit_kmh: float = 90.0
    min_duration_s: float = 10.0
    enforcement_tolerance: bool = False


@dataclass(frozen=True)
class ContinuousDrivingParams:
    """``driver.continuous_driving``: CTB 67-C caput (the limit comes from the driver period);
    a ``notice`` while driving within ``warn_before_min`` of it."""

    break_piece_min: float = 5.0
    warn_before_min: float = 30.0


@dataclass(frozen=True)
class BreakParams:
    """``driver.break_per_4h``: CTB 67-C §1-A, CLT 235-E I."""

    drive_block_h: float = 4.0
    break_min: float = 30.0
    break_piece_min: float = 5.0


@dataclass(frozen=True)
class DailyRestParams:
    """``driver.daily_rest``: CTB 67-C §3 (the numbers come from the driver period)."""


@dataclass(frozen=True)
class WorkdayParams:
    """``driver.workday``: CLT 235-C; a duty lies between two rests of ``duty_rest_h``."""

    normal_h: float = 8.0
    overtime_h: float = 2.0
    duty_rest_h: float = 8.0
    #: a ``notice`` while on duty within this many minutes of the limit
    warn_before_min: float = 30.0


@dataclass(frozen=True)
class TwoDriversParams:
    """``driver.two_drivers``: BA 86 §3."""

    min_length_km: float = 525.0
    night_start: str = "18:00"
    night_end: str = "06:00"
    overnight_stop_h: float = 8.0


@dataclass(frozen=True)
class UnidentifiedParams:
    """``driver.unidentified``: CONTRAN 938/2022 art. 3 VI.

    ``episode_gap_min`` (not in the text) closes an episode when the vehicle stays stopped that
    long with slot 1 still empty, so a bus parked overnight does not make one finding of two days.
    """

    after_s: float = 60.0
    episode_gap_min: float = 15.0


@dataclass(frozen=True)
class InterruptionParams:
    """``trip.interruption``: SP 39, 78; BA 32; TO 56 (``limit_min`` None: always a report)."""

    interruption_after_min: float = 15.0
    limit_min: float | None = None


@dataclass(frozen=True)
class AssistanceParams:
    """``trip.assistance_due``: BA 58 §2 I (``after_h`` None: any duration, SP 39 §1).

    ``grace_min`` (not in the texts, which want assistance at once) is the operator's policy for
    when a report of assistance given still counts as timely: due ``grace_min`` after it opens.
    """

    after_h: float | None = None
    carrier_fault_only: bool = True
    grace_min: float = 0.0


@dataclass(frozen=True)
class ReportDueParams:
    """``trip.report_due``: SP 41; BA 33, 34, 58 §2 II; TO 57, 58."""

    due_h: float = 48.0
    long_interruption_h: float | None = None
    omitted_fine_days: int | None = None


@dataclass(frozen=True)
class NoParams:
    """A rule without parameters."""


@dataclass(frozen=True)
class PresenceParams:
    """``schedule.presence``: BA 58 §1; TO 63."""

    before_min: float = 10.0
    exempt_services: tuple[str, ...] = ()


@dataclass(frozen=True)
class LateDepartureParams:
    """``schedule.late_departure``: BA 59; SP 15 §1 item 2."""

    tolerance_min: float = 10.0


@dataclass(frozen=True)
class StandingParams:
    """``occupancy.standing``: SP 13 §4, 37; BA 30; TO 59."""

    standing_services: tuple[str, ...] = ()
    semiurban_pct: float | None = None


@dataclass(frozen=True)
class DoorsParams:
    """``doors.open_while_moving``: SP 71 II; TO 70 II."""

    moving_kmh: float = 5.0
    min_s: float = 3.0


@dataclass(frozen=True)
class IndexParams:
    """``occupancy.index``: SP 15 §2 (limits per service; none = the statistic alone)."""

    limits: dict[str, float] = field(default_factory=dict)
    tolerance: float = 0.0


@dataclass(frozen=True)
class RegistradorParams:
    """``equipment.registrador``: SP 61 §2; BA 48 §2; TO 66; CTB 230."""

    moving_gps_kmh: float = 5.0
    silent_s: float = 60.0
    disagree_pct: float = 10.0
    disagree_min: float = 5.0


@dataclass(frozen=True)
class RetentionParams:
    """``retention.minimum``: SP 61 §3; TO 66 §1."""

    minimum_days: int = 365


SEVERITIES = ("infraction", "warning", "deadline", "report")
