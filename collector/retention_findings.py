"""``retention.minimum`` findings, judged on the store (not by ``frota check``): inside the
minimum period of the vehicle's profile (SP 365 d, art. 61 §3; TO 90 d, art. 66 §1; BA 365 d),
the records a vehicle must have and the store lacks (docs/rules.md, "The checks").

Causes, each one finding naming the gap and the vehicle-day (local, the profile's zone) where it
starts:

- ``seq_gap`` — an agent's ``seq`` jumps (seq 41-57 missing between two stored records): records
  the agent numbered never reached the store, or left it. A seq the collector saw and refused
  counts as missing too (it is in ``rejects``, not in the record); one whose frame is stored
  under another seq (link ``frame``) or kept as a conflict does not.
- ``frame_gap`` — registrador frame numbers (``device_seq``) jump, in device time order (a
  counter that goes back is a restart, not a gap).
- ``no_registrador`` — a whole hour in which the GPS shows the vehicle moving (a position at or
  above ``equipment.registrador``'s ``moving_gps_kmh``) and the store holds no registrador record
  (only for vehicles whose registrador frames are in the store at all).
- ``short_history`` — the store holds less than the minimum: an agent's oldest stored record is
  inside the minimum period but is not its seq 1, and the seqs before it were not pruned (so they
  were lost); or a prune deleted records the minimum now covers (the profile changed).

All but the prunes are judged from the per vehicle-day summaries of collector/retention_days.py
(brought up to date with what arrived first), never by reading the minimum period's records.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Final

from collector.registry import Registry
from collector.retention import RULE, cutoff_ms, local_day, vehicle_profile
from collector.retention_days import Day, Summaries, frames_in_order, hour_runs, merge_runs
from collector.rules.profile import DEFAULT_PROFILE, Profile
from collector.store import Store
from protocols.records import ms_to_ts

HOUR_MS: Final = 3_600_000


def retention_findings(store: Store, registry: Registry | None, profiles: Mapping[str, Profile],
                       now_ms: int, default: str = DEFAULT_PROFILE,
                       summaries: Summaries | None = None) -> list[dict[str, Any]]:
    """Every ``retention.minimum`` finding of the store, judged on local day of ``now``, from the
    per vehicle-day summaries (``summaries``: the running collector's, kept between
    evaluations; brought up to date with what arrived first)."""
    days = summaries if summaries is not None else Summaries(store)
    days.update(registry, dict(profiles), default)
    out: list[dict[str, Any]] = []
    for vehicle in store.vehicle_ids():
        profile = vehicle_profile(vehicle, registry, profiles, default)
        rule = profile.rules.get(RULE)
        if rule is None or not rule.applies:
            continue
        since = cutoff_ms(local_day(now_ms, profile), int(rule.params.minimum_days), profile)
        for cause, start, end, details in _gaps(store, days, vehicle, since, profile):
            out.append(_finding(vehicle, profile, cause, start, end,
                                {**details, "day": local_day(start, profile).isoformat(),
                                 "minimum_days": int(rule.params.minimum_days)}))
    return out


def _finding(vehicle: str, profile: Profile, cause: str, start: int, end: int | None,
             details: dict[str, Any]) -> dict[str, Any]:
    rule = profile.rule(RULE)
    key = f"{RULE}|{vehicle}|{cause}|{details.get('agent', '')}|{details['gap']}"
    return {
        "id": hashlib.sha256(key.encode()).hexdigest()[:20],
        "rule": RULE,
        "profile": profile.name,
        "severity": rule.severity,
        "vehicle": vehicle,
        "driver": None,
        "trip": None,
        "line": None,
        "start": ms_to_ts(start),
        "end": None if end is None else ms_to_ts(end),
        "basis": list(rule.basis),
        "details": {"cause": cause, **details},
    }


Gap = tuple[str, int, int | None, dict[str, Any]]


def _gaps(store: Store, summaries: Summaries, vehicle: str, since: int,
          profile: Profile) -> Iterator[Gap]:
    days = summaries.days(vehicle, since)
    yield from _seq_gaps(store, summaries, vehicle, since, days)
    yield from _frame_gaps(days)
    yield from _silent_hours(days, profile)
    for before_ms, deleted, done_ms in store._read(
            "SELECT before_ms, deleted, done_ms FROM prunes WHERE vehicle = ? AND before_ms > ?",
            (vehicle, since)):
        yield ("short_history", since, int(before_ms),
               {"gap": f"{int(deleted)} records before {ms_to_ts(int(before_ms))} pruned "
                       f"{ms_to_ts(int(done_ms))}, inside the minimum"})


def _seq_gaps(store: Store, summaries: Summaries, vehicle: str, since: int,
              days: list[Day]) -> Iterator[Gap]:
    runs: dict[str, list[list[int]]] = {}
    for day in days:
        for agent, got in day.seqs.items():
            runs.setdefault(agent, []).extend(got)
    if not runs:
        return
    kept = [(str(a), int(s)) for a, s in store._read(
        "SELECT agent, seq FROM links WHERE vehicle = ? AND state IN ('frame', 'conflict')",
        (vehicle,))]
    for agent in sorted(runs):
        seqs = merge_runs([*runs[agent], *([s, s, -1, -1] for a, s in kept if a == agent)])
        first = seqs[0][0]
        if first > 1 and not store._read(
                "SELECT 1 FROM links WHERE vehicle = ? AND agent = ? AND seq = ? "
                "AND state = 'pruned'", (vehicle, agent, first - 1)) \
                and not summaries.older_seq(vehicle, agent, first, since):
            ts = seqs[0][2] if seqs[0][2] >= 0 else since
            yield ("short_history", since, ts,
                   {"agent": agent, "gap": f"seq 1-{first - 1} missing: the oldest record "
                                           f"kept is seq {first}"})
        for low, high in itertools.pairwise(seqs):
            before, after = low[1], high[0]
            start = low[3] if low[3] >= 0 else high[2]
            end = high[2] if high[2] >= 0 else None
            what = (f"seq {before + 1}" if after == before + 2
                    else f"seq {before + 1}-{after - 1}")
            yield ("seq_gap", start, end, {"agent": agent, "gap": f"{what} missing"})


def _frame_gaps(days: list[Day]) -> Iterator[Gap]:
    for low, high in itertools.pairwise(frames_in_order(days)):
        if high[0] > low[1] + 1:
            first, last = low[1] + 1, high[0] - 1
            what = f"frame {first}" if first == last else f"frames {first}-{last}"
            yield ("frame_gap", low[3], high[2],
                   {"agent": "registrador", "gap": f"registrador {what} missing"})


def _silent_hours(days: list[Day], profile: Profile) -> Iterator[Gap]:
    framed = {h for day in days for h in day.framed}
    if not framed:
        return  # no registrador records in the store: nothing to miss (e.g. an FMS bus)
    equipment = profile.rules.get("equipment.registrador")
    moving = float(equipment.params.moving_gps_kmh) if equipment is not None else 5.0
    hours = sorted({h for day in days for h, kmh in day.moving.items() if kmh >= moving}
                   - framed)
    for run in hour_runs(hours):
        start, end = run[0] * HOUR_MS, (run[-1] + 1) * HOUR_MS
        local = datetime.fromtimestamp(start / 1000, profile.tz)
        yield ("no_registrador", start, end,
               {"gap": f"{len(run)} h from {local:%Y-%m-%d %H:00} moving by GPS with no "
                       "registrador record"})
