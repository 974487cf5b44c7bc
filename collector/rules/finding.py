"""Findings (docs/records.md): building them with a stable id, and their output order."""

from __future__ import annotations

import hashlib
from typing import Any

from collector.rules.profile import Profile, RuleConfig
from protocols.records import ms_to_ts

Finding = dict[str, Any]


def finding_id(rule: str, subject: str, trip: str | None, start_ms: int) -> str:
    """A stable id from the rule, the vehicle or driver, the trip and the episode's start."""
    text = f"{rule}|{subject}|{trip or ''}|{start_ms}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def build(
    cfg: RuleConfig,
    profile: Profile,
    *,
    subject: str,
    vehicle: str | None,
    driver: str | None,
    trip: str | None,
    line: str | None,
    start_ms: int,
    end_ms: int | None,
    details: dict[str, Any],
) -> Finding:
    """One finding as printed; ``subject`` (vehicle or driver id) goes into the id."""
    if profile.outside_validity(start_ms):
        details["outside_validity"] = True
    return {
        "id": finding_id(cfg.rule, subject, trip, start_ms),
        "rule": cfg.rule,
        "profile": profile.name,
        "severity": cfg.severity,
        "vehicle": vehicle,
        "driver": driver,
        "trip": trip,
        "line": line,
        "start": ms_to_ts(start_ms),
        "end": None if end_ms is None else ms_to_ts(end_ms),
        "basis": list(cfg.basis),
        "details": details,
    }


def sort_key(finding: Finding) -> tuple[str, str, str, str, str]:
    """docs/records.md's order: start, rule, vehicle, driver, id (nulls first)."""
    return (
        finding["start"],
        finding["rule"],
        finding["vehicle"] or "",
        finding["driver"] or "",
        finding["id"],
    )


def minutes(ms: int) -> float:
    """A duration in minutes, to 0.01 min (a 29 min 58 s break reads 29.97, not 30)."""
    return round(ms / 60_000, 2)
