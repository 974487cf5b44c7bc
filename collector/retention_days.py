"""What ``retention.minimum`` judges, summed up per vehicle-day (migration ``015_retention_days``),
so that its findings cost what arrived, not the minimum period's records (docs/collector.md,
"Live findings").

A summary holds, for one vehicle and one local day (the zone of the vehicle's profile, whose
midnights are whole UTC hours in every Brazilian zone):

- ``seqs``: per agent (``operator`` entries aside), the seqs stored as runs ``[lo, hi, ts of lo,
  ts of hi]``;
- ``frames``: the registrador frame numbers (``device_seq``) in the order of their first record
  (time, then number) as runs of consecutive numbers ``[first, last, ts of first, ts of last]``;
  ``tail``, the numbers first seen in the day's last minute: a frame whose records straddle
  midnight belongs to the day before;
- ``framed``: the hours (ms // 3,600,000) with a registrador record; ``moving``: each hour's
  highest GPS speed (positions).

Each evaluation reads what arrived by row id (after :func:`store_live.horizon`, as the live rules
do) and merges it into the days it touches; a record out of order inside a day's frames (earlier
than the day's newest frame) makes that one day be summed up again from the store (its rows and
its compacted records). A vehicle whose profile's zone changed is summed up again whole. The
findings (collector/retention_findings.py) combine the summaries of the days inside the minimum
period: at most a year of small rows per vehicle, never its records.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Final

import orjson

from collector import store_disc, store_live
from collector.registry import Registry
from collector.retention import local_day, vehicle_profile
from collector.rules.profile import DEFAULT_PROFILE, Profile, local_midnight_ms
from collector.store import Store

HOUR_MS: Final = 3_600_000
TAIL_MS: Final = 60_000
OPERATOR: Final = "operator"
#: ``findings_state``: the newest row id summed up.
LAST_ID: Final = "retention_last_id"
UPSERT: Final = ("INSERT INTO retention_days (vehicle, day, zone, summary) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT (vehicle, day) DO UPDATE SET zone = excluded.zone, "
                 "summary = excluded.summary")

#: One record as summed up: (agent, seq, ts ms, device_seq, kind, GPS km/h of a position).
Row = tuple[str, int, int, int | None, str, float | None]


@dataclass
class Day:
    """One vehicle-day's summary (see the module docstring)."""

    start_ms: int
    end_ms: int
    seqs: dict[str, list[list[int]]] = field(default_factory=dict)
    frames: list[list[int]] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    framed: list[int] = field(default_factory=list)
    moving: dict[int, float] = field(default_factory=dict)

    def dump(self) -> str:
        """As stored (JSON)."""
        return orjson.dumps({"start": self.start_ms, "end": self.end_ms, "seqs": self.seqs,
                             "frames": self.frames, "tail": self.tail, "framed": self.framed,
                             "moving": {str(h): v for h, v in self.moving.items()}}).decode()

    @classmethod
    def load(cls, text: str) -> Day:
        """From :meth:`dump`."""
        doc = orjson.loads(text)
        return cls(int(doc["start"]), int(doc["end"]), doc["seqs"], doc["frames"], doc["tail"],
                   doc["framed"], {int(h): float(v) for h, v in doc["moving"].items()})

    def add(self, rows: Sequence[Row], before: set[int]) -> bool:
        """Merge rows of this day (``before``: the day before's tail); False when a frame came
        out of order (sum the day up again from the store)."""
        points: dict[str, list[tuple[int, int]]] = {}
        framed = set(self.framed)
        for agent, seq, ts, number, kind, kmh in rows:
            if agent != OPERATOR:
                points.setdefault(agent, []).append((seq, ts))
            if number is not None:
                framed.add(ts // HOUR_MS)
            if kind == "position" and kmh is not None:
                hour = ts // HOUR_MS
                self.moving[hour] = max(kmh, self.moving.get(hour, kmh))
        self.framed = sorted(framed)
        for agent, got in points.items():
            self.seqs[agent] = merge_runs([*self.seqs.get(agent, []),
                                           *([s, s, t, t] for s, t in got)])
        first: dict[int, int] = {}
        for _, _, ts, number, _, _ in rows:
            if number is not None and ts < first.get(number, ts + 1):
                first[number] = ts
        for number, ts in sorted(first.items(), key=lambda item: (item[1], item[0])):
            if number in before and ts < self.start_ms + TAIL_MS:
                continue                    # the day before's frame, straddling midnight
            seen = next((r for r in self.frames if r[0] <= number <= r[1]), None)
            if seen is not None:
                if ts >= seen[3]:
                    continue                # another record of a frame already placed
                return False
            last = self.frames[-1] if self.frames else None
            if last is not None and (ts, number) < (last[3], last[1]):
                return False
            if last is not None and number == last[1] + 1:
                last[1], last[3] = number, ts
            else:
                self.frames.append([number, number, ts, ts])
            if ts >= self.end_ms - TAIL_MS:
                self.tail.append(number)
        return True


def merge_runs(runs: Iterable[Sequence[int]]) -> list[list[int]]:
    """Runs ``[lo, hi, ts of lo, ts of hi]`` (ts -1: a seq known without a time) merged into
    disjoint sorted runs."""
    out: list[list[int]] = []
    for lo, hi, ts_lo, ts_hi in sorted(runs, key=lambda r: (r[0], r[2] < 0)):
        if out and lo <= out[-1][1] + 1:
            top = out[-1]
            if hi > top[1] or (hi == top[1] and top[3] < 0 <= ts_hi):
                top[1], top[3] = hi, ts_hi
            continue
        out.append([lo, hi, ts_lo, ts_hi])
    return out


def day_bounds(ms: int, profile: Profile) -> tuple[date, int, int]:
    """The local day of an instant and its bounds in ms."""
    day = local_day(ms, profile)
    return (day, local_midnight_ms(day, profile.tz),
            local_midnight_ms(day + timedelta(days=1), profile.tz))


def _kmh(store: Store) -> str:
    return store.json_number_sql.format(field="kmh")


def _raw(store: Store, vehicle: str, lo: int, hi: int) -> list[Row]:
    return [(str(a), int(s), int(t), None if d is None else int(d), str(k),
             None if v is None else float(v))
            for a, s, t, d, k, v in store._read(
                f"SELECT agent, seq, ts_ms, device_seq, kind, CASE WHEN kind = 'position' THEN "
                f"{_kmh(store)} END FROM records WHERE vehicle = ? AND ts_ms >= ? AND ts_ms < ?",
                (vehicle, lo, hi))]


def _compacted(store: Store, vehicle: str, lo: int, hi: int) -> Iterator[Row]:
    for r in store_disc.vehicle_rows(store, vehicle, lo, hi):
        kmh = None
        if r.kind == "position":
            value = orjson.loads(r.text).get("kmh")
            kmh = float(value) if isinstance(value, int | float) else None
        yield (r.agent, r.seq, r.ts_ms, r.device_seq, r.kind, kmh)


class Summaries:
    """The per vehicle-day summaries of one store, brought up to date by :meth:`update`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._last: int | None = None
        #: vehicle -> day -> summary, as stored (read once, then kept up to date)
        self._cache: dict[str, dict[str, Day]] = {}

    def update(self, registry: Registry | None, profiles: dict[str, Profile],
               default: str = DEFAULT_PROFILE) -> set[str]:
        """Merge what arrived since the last update; the vehicles touched."""
        store = self.store
        stored = store_live.state(store, LAST_ID)   # None: never summed up
        last = stored or 0
        if last != self._last:
            self._cache.clear()             # another collector summed up in between
        until = store_live.horizon(store)
        touched: dict[str, list[Row]] = {}
        newest = last
        while True:
            rows = store._read(
                "SELECT id, vehicle, agent, seq, ts_ms, device_seq, kind, CASE WHEN kind = "
                f"'position' THEN {_kmh(store)} END FROM records WHERE id > ? AND id <= ? "
                "ORDER BY id LIMIT 10000", (newest, (1 << 62) if until is None else until))
            for i, v, a, sq, t, d, k, kmh in rows:
                newest = int(i)
                if stored is not None:
                    touched.setdefault(str(v), []).append(
                        (str(a), int(sq), int(t), None if d is None else int(d), str(k),
                         None if kmh is None else float(kmh)))
            if len(rows) < 10000:
                break
        newest = max(newest, until or 0)
        zones = {str(v): str(z) for v, z in store._read(
            "SELECT vehicle, min(zone) FROM retention_days GROUP BY vehicle")}
        again = set(store.vehicle_ids()) if stored is None else {
            v for v in touched if v in zones
            and zones[v] != str(vehicle_profile(v, registry, profiles, default).tz)}
        for vehicle in sorted(again):
            self._whole(vehicle, vehicle_profile(vehicle, registry, profiles, default))
        for vehicle, got in touched.items():
            if vehicle not in again:
                self._merge(vehicle, vehicle_profile(vehicle, registry, profiles, default), got)
        store.apply([(store_live.UPSERT_STATE, [(LAST_ID, newest)])])
        self._last = newest
        return set(touched) | again

    def _days(self, vehicle: str) -> dict[str, Day]:
        """Every summary of the vehicle (from the cache, read once)."""
        found = self._cache.get(vehicle)
        if found is None:
            found = {str(d): Day.load(str(s)) for d, s in self.store._read(
                "SELECT day, summary FROM retention_days WHERE vehicle = ?", (vehicle,))}
            self._cache[vehicle] = found
        return found

    def _merge(self, vehicle: str, profile: Profile, rows: list[Row]) -> None:
        by_day: dict[date, list[Row]] = {}
        bounds: dict[date, tuple[int, int]] = {}
        for row in rows:
            day, lo, hi = day_bounds(row[2], profile)
            by_day.setdefault(day, []).append(row)
            bounds[day] = (lo, hi)
        known = self._days(vehicle)
        out: list[tuple[str, str, str, str]] = []
        for day in sorted(by_day):
            name = day.isoformat()
            prev = known.get((day - timedelta(days=1)).isoformat())
            before = set(prev.tail) if prev is not None else set()
            summary = copy.deepcopy(known[name]) if name in known else Day(*bounds[day])
            got = sorted(by_day[day], key=lambda r: (r[2], r[3] or 0))
            if not summary.add(got, before):
                summary = Day(*bounds[day])
                lo, hi = bounds[day]
                summary.add(sorted([*_raw(self.store, vehicle, lo, hi),
                                    *_compacted(self.store, vehicle, lo, hi)],
                                   key=lambda r: (r[2], r[3] or 0)), before)
            known[name] = summary
            out.append((vehicle, name, str(profile.tz), summary.dump()))
        self.store.apply([(UPSERT, out)])

    def _whole(self, vehicle: str, profile: Profile) -> None:
        """Sum a vehicle up again from everything stored, one local day at a time (its rows and
        its compacted days)."""
        store = self.store
        store.apply([("DELETE FROM retention_days WHERE vehicle = ?", [(vehicle,)])])
        known: dict[str, Day] = {}
        self._cache[vehicle] = known
        lows, highs = [], []
        for low, high in store._read("SELECT min(ts_ms), max(ts_ms) FROM records "
                                     "WHERE vehicle = ?", (vehicle,)):
            if low is not None:
                lows.append(int(low))
                highs.append(int(high))
        for found in store_disc.days(store, vehicle):
            lows.append(found.first_ms)
            highs.append(found.last_ms)
        if not lows:
            return
        day, start, end = day_bounds(min(lows), profile)
        before: set[int] = set()
        out: list[tuple[str, str, str, str]] = []
        while start <= max(highs):
            rows = sorted([*_raw(store, vehicle, start, end),
                           *_compacted(store, vehicle, start, end)],
                          key=lambda r: (r[2], r[3] or 0))
            before_next: set[int] = set()
            if rows:
                summary = Day(start, end)
                summary.add(rows, before)
                known[day.isoformat()] = summary
                out.append((vehicle, day.isoformat(), str(profile.tz), summary.dump()))
                before_next = set(summary.tail)
            before = before_next
            day += timedelta(days=1)
            start, end = end, local_midnight_ms(day + timedelta(days=1), profile.tz)
            if len(out) >= 100:
                store.apply([(UPSERT, out)])
                out = []
        if out:
            store.apply([(UPSERT, out)])

    def days(self, vehicle: str, since_ms: int) -> list[Day]:
        """The vehicle's summaries of the days starting at or after ``since``, in order."""
        found = self._days(vehicle)
        return [found[d] for d in sorted(found) if found[d].start_ms >= since_ms]

    def older_seq(self, vehicle: str, agent: str, seq: int, since_ms: int) -> bool:
        """Whether a record of the agent with a seq below ``seq`` is still stored before
        ``since`` (a row, or a compacted day's record)."""
        if self.store._read("SELECT 1 FROM records WHERE vehicle = ? AND agent = ? AND seq < ? "
                            "LIMIT 1", (vehicle, agent, seq)):
            return True
        compacted = {str(d) for (d,) in self.store._read(
            "SELECT day FROM disc_days WHERE vehicle = ?", (vehicle,))}
        return any(d in compacted and summary.start_ms < since_ms
                   and any(r[0] < seq for r in summary.seqs.get(agent, []))
                   for d, summary in self._days(vehicle).items())


def frames_in_order(days: Sequence[Day]) -> list[list[int]]:
    """The frame runs of consecutive days, one after the other."""
    return [run for day in days for run in day.frames]


def hour_runs(hours: Sequence[int]) -> list[list[int]]:
    """Sorted hours as runs of consecutive hours."""
    out: list[list[int]] = []
    for hour in hours:
        if out and hour == out[-1][-1] + 1:
            out[-1].append(hour)
        else:
            out.append([hour])
    return out


def kept(points: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """(agent, seq) → per agent sorted seqs."""
    out: dict[str, list[int]] = {}
    for agent, seq in points:
        bisect.insort(out.setdefault(agent, []), seq)
    return out


def rows_of(found: Iterable[Sequence[Any]]) -> list[tuple[str, int]]:
    """Query rows (agent, seq) as typed pairs."""
    return [(str(a), int(s)) for a, s in found]
