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
from dataclasses import dataclass, field
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
    equipment = profile.rules.get("equipment.registrador")
    moving = float(equipment.params.moving_gps_kmh) if equipment is not None else 5.0
    # the compacted days inside the period (collector/store_disc.py), as what the gaps need
    packed = _packed(store, vehicle, since, moving)
    yield from _seq_gaps(store, vehicle, since, packed)
    yield from _frame_gaps(store, vehicle, since, packed)
    yield from _silent_hours(store, vehicle, since, profile, packed, moving)
    for before_ms, deleted, done_ms in store._read(
            "SELECT before_ms, deleted, done_ms FROM prunes WHERE vehicle = ? AND before_ms > ?",
            (vehicle, since)):
        yield ("short_history", since, int(before_ms),
               {"gap": f"{int(deleted)} records before {ms_to_ts(int(before_ms))} pruned "
                       f"{ms_to_ts(int(done_ms))}, inside the minimum"})


@dataclass
class Packed:
    """What the gaps need of compacted records: each agent's seqs and the frame numbers as the
    ends of their unbroken runs (a run's inside cannot hold a gap), the hours with a registrador
    record and the hours moving by GPS."""

    seqs: list[tuple[str, int, int]] = field(default_factory=list)   # agent, seq, ts
    frames: list[tuple[int, int]] = field(default_factory=list)      # frame, first ts
    #: (agent, first, last) of each run of seqs, (first, last) of each run of frames: the two
    #: ends of a run side by side are no gap
    seq_runs: set[tuple[str, int, int]] = field(default_factory=set)
    frame_runs: set[tuple[int, int]] = field(default_factory=set)
    framed_hours: set[int] = field(default_factory=set)
    moved_hours: set[int] = field(default_factory=set)

    def add(self, other: Packed) -> None:
        self.seqs += other.seqs
        self.frames += other.frames
        self.seq_runs |= other.seq_runs
        self.frame_runs |= other.frame_runs
        self.framed_hours |= other.framed_hours
        self.moved_hours |= other.moved_hours


#: Each compacted day's facts, by (store, vehicle, day, when made, moving km/h): a day does not
#: change until reopened (made again), so each refresh decodes only the days new since.
_FACTS: dict[tuple[str, str, str, int, float], Packed] = {}
_FACTS_MAX: Final = 100_000


def _packed(store: Store, vehicle: str, since: int, moving: float) -> Packed:
    out = Packed()
    for day in store_disc.days(store, vehicle, since):
        whole = day.first_ms >= since
        key = (store.location, vehicle, day.day, day.made_ms, moving)
        facts = _FACTS.get(key) if whole else None
        if facts is None:
            facts = _facts((r for r in store_disc.day_rows(store, day) if r.ts_ms >= since),
                           moving)
            if whole:
                if len(_FACTS) >= _FACTS_MAX:
                    _FACTS.clear()
                _FACTS[key] = facts
        out.add(facts)
    return out


def _ends(items: list[tuple[int, int]],
          ordered: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(number, ts) sorted (by number, or as given when ``ordered``): the ends of each run of
    consecutive numbers, and the runs as (first, last)."""
    items = items if ordered else sorted(items)
    kept: list[tuple[int, int]] = []
    runs: list[tuple[int, int]] = []
    for i, (number, ts) in enumerate(items):
        starts = i == 0 or items[i - 1][0] != number - 1
        ends = i == len(items) - 1 or items[i + 1][0] != number + 1
        if starts:
            first = number
        if starts or ends:
            kept.append((number, ts))
        if ends and number > first + 1:
            runs.append((first, number))
    return kept, runs


def _facts(rows: Iterator[DayRow], moving: float) -> Packed:
    by_agent: dict[str, list[tuple[int, int]]] = {}
    frames: dict[int, int] = {}
    out = Packed()
    for row in rows:
        hour = row.ts_ms // HOUR_MS
        if row.agent != OPERATOR:
            by_agent.setdefault(row.agent, []).append((row.seq, row.ts_ms))
        if row.device_seq is not None:
            number = int(row.device_seq)
            frames[number] = min(row.ts_ms, frames.get(number, row.ts_ms))
            out.framed_hours.add(hour)
        if row.kind == "position" and hour not in out.moved_hours:
            speed = orjson.loads(row.text).get("kmh")
            if isinstance(speed, int | float) and speed >= moving:
                out.moved_hours.add(hour)
    for agent, seqs in by_agent.items():
        kept, runs = _ends(seqs, False)
        out.seqs += [(agent, seq, ts) for seq, ts in kept]
        out.seq_runs |= {(agent, a, b) for a, b in runs}
    in_time = sorted(frames.items(), key=lambda item: (item[1], item[0]))
    out.frames, runs = _ends(in_time, True)
    out.frame_runs = set(runs)
    return out


def _seq_gaps(store: Store, vehicle: str, since: int, packed: Packed) -> Iterator[Gap]:
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
    for agent, seq, ts_ms in packed.seqs:
        by_agent.setdefault(agent, []).append((seq, ts_ms))
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
            if after > before + 1 and (agent, before, after) not in packed.seq_runs:
                start = present[before] if present[before] >= 0 else present[after]
                end = present[after] if present[after] >= 0 else None
                what = (f"seq {before + 1}" if after == before + 2
                        else f"seq {before + 1}-{after - 1}")
                yield ("seq_gap", start, end, {"agent": agent, "gap": f"{what} missing"})


def _packed_before(store: Store, vehicle: str, agent: str, seq: int, since: int) -> bool:
    """Whether a compacted day before ``since`` holds a record of the agent before ``seq``
    (newest day first: an agent's seqs grow with time)."""
    for day in reversed(store_disc.days(store, vehicle, None, since)):
        if any(r.agent == agent and r.seq < seq for r in store_disc.day_rows(store, day)):
            return True
    return False


def _frame_gaps(store: Store, vehicle: str, since: int, packed: Packed) -> Iterator[Gap]:
    previous: tuple[int, int] | None = None
    earliest: dict[int, int] = {}
    for device_seq, ts_ms in [*store._read(
            "SELECT device_seq, min(ts_ms) FROM records WHERE vehicle = ? AND ts_ms >= ? "
            "AND device_seq IS NOT NULL GROUP BY device_seq", (vehicle, since)),
            *packed.frames]:
        number, at = int(device_seq), int(ts_ms)
        earliest[number] = min(at, earliest.get(number, at))
    for number, at in sorted(earliest.items(), key=lambda item: (item[1], item[0])):
        if previous is not None and number > previous[0] + 1 \
                and (previous[0], number) not in packed.frame_runs:
            first, last = previous[0] + 1, number - 1
            what = f"frame {first}" if first == last else f"frames {first}-{last}"
            yield ("frame_gap", previous[1], at,
                   {"agent": "registrador", "gap": f"registrador {what} missing"})
        previous = (number, at)


def _silent_hours(store: Store, vehicle: str, since: int, profile: Profile,
                  packed: Packed, moving: float) -> Iterator[Gap]:
    framed = {int(h) for (h,) in store._read(
        "SELECT DISTINCT ts_ms / 3600000 FROM records WHERE vehicle = ? AND ts_ms >= ? "
        "AND device_seq IS NOT NULL", (vehicle, since))}
    framed |= packed.framed_hours
    if not framed:
        return  # no registrador records in the store: nothing to miss (e.g. an FMS bus)
    kmh = store.json_number_sql.format(field="kmh")
    moved = {int(h) for (h,) in store._read(
        f"SELECT DISTINCT ts_ms / 3600000 FROM records WHERE vehicle = ? AND ts_ms >= ? "
        f"AND kind = 'position' AND {kmh} >= ?", (vehicle, since, moving))}
    moved |= packed.moved_hours
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
