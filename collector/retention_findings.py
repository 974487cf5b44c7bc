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
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Final

import orjson

from collector import store_disc
from collector.registry import Registry
from collector.retention import RULE, cutoff_ms, local_day, vehicle_profile
from collector.rules.profile import DEFAULT_PROFILE, Profile
from collector.store import Store
from collector.store_disc import DayRow
from protocols.records import ms_to_ts

HOUR_MS: Final = 3_600_000
OPERATOR: Final = "operator"


def retention_findings(store: Store, registry: Registry | None, profiles: Mapping[str, Profile],
                       now_ms: int, default: str = DEFAULT_PROFILE) -> list[dict[str, Any]]:
    """Every ``retention.minimum`` finding of the store, judged on local day of ``now``."""
    out: list[dict[str, Any]] = []
    for vehicle in store.vehicle_ids():
        profile = vehicle_profile(vehicle, registry, profiles, default)
        rule = profile.rules.get(RULE)
        if rule is None or not rule.applies:
            continue
        since = cutoff_ms(local_day(now_ms, profile), int(rule.params.minimum_days), profile)
        for cause, start, end, details in _gaps(store, vehicle, since, profile):
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


def _gaps(store: Store, vehicle: str, since: int, profile: Profile) -> Iterator[Gap]:
    # the compacted days' records inside the period (collector/store_disc.py), as rows
    packed = list(store_disc.vehicle_rows(store, vehicle, since))
    yield from _seq_gaps(store, vehicle, since, packed)
    yield from _frame_gaps(store, vehicle, since, packed)
    yield from _silent_hours(store, vehicle, since, profile, packed)
    for before_ms, deleted, done_ms in store._read(
            "SELECT before_ms, deleted, done_ms FROM prunes WHERE vehicle = ? AND before_ms > ?",
            (vehicle, since)):
        yield ("short_history", since, int(before_ms),
               {"gap": f"{int(deleted)} records before {ms_to_ts(int(before_ms))} pruned "
                       f"{ms_to_ts(int(done_ms))}, inside the minimum"})


def _seq_gaps(store: Store, vehicle: str, since: int, packed: list[DayRow]) -> Iterator[Gap]:
    kept = {(str(a), int(s)) for a, s in store._read(
        "SELECT agent, seq FROM links WHERE vehicle = ? AND state IN ('frame', 'conflict')",
        (vehicle,))}
    pruned = {(str(a), int(s)) for a, s in store._read(
        "SELECT agent, seq FROM links WHERE vehicle = ? AND state = 'pruned'", (vehicle,))}
    by_agent: dict[str, list[tuple[int, int]]] = {}
    for agent, seq, ts_ms in store._read(
            "SELECT agent, seq, ts_ms FROM records WHERE vehicle = ? AND agent <> ? "
            "AND ts_ms >= ? ORDER BY agent, seq", (vehicle, OPERATOR, since)):
        by_agent.setdefault(str(agent), []).append((int(seq), int(ts_ms)))
    for row in packed:
        if row.agent != OPERATOR:
            by_agent.setdefault(row.agent, []).append((row.seq, row.ts_ms))
    for agent, rows in by_agent.items():
        present = dict(rows)
        for seq in (s for a, s in kept if a == agent):
            present.setdefault(seq, -1)
        seqs = sorted(present)
        first = seqs[0]
        if first > 1 and (agent, first - 1) not in pruned:
            older = store._read("SELECT count(*) FROM records WHERE vehicle = ? AND agent = ? "
                                "AND seq < ?", (vehicle, agent, first))
            if int(older[0][0]) == 0 and not _packed_before(store, vehicle, agent, first, since):
                ts = present[first] if present[first] >= 0 else since
                yield ("short_history", since, ts,
                       {"agent": agent, "gap": f"seq 1-{first - 1} missing: the oldest record "
                                               f"kept is seq {first}"})
        for before, after in itertools.pairwise(seqs):
            if after > before + 1:
                start = present[before] if present[before] >= 0 else present[after]
                end = present[after] if present[after] >= 0 else None
                what = (f"seq {before + 1}" if after == before + 2
                        else f"seq {before + 1}-{after - 1}")
                yield ("seq_gap", start, end, {"agent": agent, "gap": f"{what} missing"})


def _packed_before(store: Store, vehicle: str, agent: str, seq: int, since: int) -> bool:
    """Whether a compacted day before ``since`` holds a record of the agent before ``seq``."""
    return any(r.agent == agent and r.seq < seq
               for r in store_disc.vehicle_rows(store, vehicle, None, since))


def _frame_gaps(store: Store, vehicle: str, since: int, packed: list[DayRow]) -> Iterator[Gap]:
    previous: tuple[int, int] | None = None
    earliest: dict[int, int] = {}
    for device_seq, ts_ms in [*store._read(
            "SELECT device_seq, min(ts_ms) FROM records WHERE vehicle = ? AND ts_ms >= ? "
            "AND device_seq IS NOT NULL GROUP BY device_seq", (vehicle, since)),
            *((r.device_seq, r.ts_ms) for r in packed if r.device_seq is not None)]:
        number, at = int(device_seq), int(ts_ms)
        earliest[number] = min(at, earliest.get(number, at))
    for number, at in sorted(earliest.items(), key=lambda item: (item[1], item[0])):
        if previous is not None and number > previous[0] + 1:
            first, last = previous[0] + 1, number - 1
            what = f"frame {first}" if first == last else f"frames {first}-{last}"
            yield ("frame_gap", previous[1], at,
                   {"agent": "registrador", "gap": f"registrador {what} missing"})
        previous = (number, at)


def _silent_hours(store: Store, vehicle: str, since: int, profile: Profile,
                  packed: list[DayRow]) -> Iterator[Gap]:
    framed = {int(h) for (h,) in store._read(
        "SELECT DISTINCT ts_ms / 3600000 FROM records WHERE vehicle = ? AND ts_ms >= ? "
        "AND device_seq IS NOT NULL", (vehicle, since))}
    framed |= {r.ts_ms // HOUR_MS for r in packed if r.device_seq is not None}
    if not framed:
        return  # no registrador records in the store: nothing to miss (e.g. an FMS bus)
    equipment = profile.rules.get("equipment.registrador")
    moving = float(equipment.params.moving_gps_kmh) if equipment is not None else 5.0
    kmh = store.json_number_sql.format(field="kmh")
    moved = {int(h) for (h,) in store._read(
        f"SELECT DISTINCT ts_ms / 3600000 FROM records WHERE vehicle = ? AND ts_ms >= ? "
        f"AND kind = 'position' AND {kmh} >= ?", (vehicle, since, moving))}
    for row in packed:
        if row.kind == "position" and row.ts_ms // HOUR_MS not in moved:
            speed = orjson.loads(row.text).get("kmh")
            if isinstance(speed, int | float) and speed >= moving:
                moved.add(row.ts_ms // HOUR_MS)
    hours = sorted(moved - framed)
    run: list[int] = []
    for hour in [*hours, None]:
        if hour is not None and (not run or hour == run[-1] + 1):
            run.append(hour)
            continue
        if run:
            start, end = run[0] * HOUR_MS, (run[-1] + 1) * HOUR_MS
            local = datetime.fromtimestamp(start / 1000, profile.tz)
            yield ("no_registrador", start, end,
                   {"gap": f"{len(run)} h from {local:%Y-%m-%d %H:00} moving by GPS with no "
                           "registrador record"})
        run = [] if hour is None else [hour]
