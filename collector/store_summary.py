"""Read-only summaries of the collector's store, for ``frota demo`` and other readers.

The store's tables belong to :mod:`collector.store` (their layout to
:mod:`collector.store_schema`); readers outside the collector ask these methods instead of
writing their own SQL. Where the dialects differ (reading a number out of the record's JSON),
each backend gives its own :attr:`StoreSummaries.json_number_sql`.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from collector import disc_columns, disc_summary, store_disc
from protocols.records import ts_to_ms


@dataclass(frozen=True)
class StoreTotals:
    """The store in three numbers."""

    records: int
    rejects: int
    #: When the newest record was received (collector clock, ms), or None for an empty store.
    last_received_ms: int | None


@dataclass
class VehicleSummary:
    """A vehicle's stored records in numbers (what ``frota demo`` prints of the trip)."""

    vehicle: str
    kinds: list[tuple[str, int]] = field(default_factory=list)  # most frequent first
    #: The devices' time span (``speed`` and ``position`` records; the agent's own records
    #: before any device spoke carry the host's clock, docs/records.md).
    first_ms: int | None = None
    last_ms: int | None = None
    agents: int = 0
    odometer_m: tuple[int, int] | None = None  # (lowest, highest) of the ``speed`` records
    boarded: int = 0
    alighted: int = 0

    @property
    def total(self) -> int:
        """Records stored for the vehicle."""
        return sum(n for _, n in self.kinds)


class StoreSummaries:
    """The summary methods of :class:`collector.store.Store` (a mixin: it reads via ``_read``)."""

    #: SQL reading the number ``{field}`` out of the ``record`` column's JSON (per dialect).
    json_number_sql: str = ""

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _read_pairs(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[list[Any], list[Any]]:
        """The two columns of a read-only query's rows as two lists (a backend may fill them
        row by row, so that no row tuple outlives its step: see :meth:`speed_columns`)."""
        rows = self._read(sql, params)
        return [row[0] for row in rows], [row[1] for row in rows]

    def _number(self, name: str) -> str:
        return self.json_number_sql.format(field=name)

    def totals(self) -> StoreTotals:
        """Records and rejects kept, and when the newest record arrived (one snapshot)."""
        rows = self._read(
            "SELECT 0, count(*), max(received_ms) FROM records "
            "UNION ALL SELECT 1, count(*), NULL FROM rejects"
        )
        by_table = {int(row[0]): row for row in rows}
        records, rejects = by_table[0], by_table[1]
        last = None if records[2] is None else int(records[2])
        packed = store_disc.count(self)  # type: ignore[arg-type]
        if packed and last is None:  # every record compacted: the latest day's latest arrival
            last = store_disc.last_received(self)  # type: ignore[arg-type]
        return StoreTotals(records=int(records[1]) + packed, rejects=int(rejects[1]),
                           last_received_ms=last)

    def vehicle_summary(self, vehicle: str) -> VehicleSummary:
        """Counts per kind, time span, agents, odometer and passengers of a vehicle's records."""
        out = VehicleSummary(vehicle)
        out.kinds = [(str(k), int(n)) for k, n in self._read(
            "SELECT kind, count(*) FROM records WHERE vehicle = ? GROUP BY kind "
            "ORDER BY count(*) DESC, kind", (vehicle,))]
        span = self._read(
            "SELECT min(ts_ms), max(ts_ms), count(DISTINCT agent) FROM records "
            "WHERE vehicle = ? AND kind IN ('speed', 'position')", (vehicle,))
        if span and span[0][0] is not None:
            out.first_ms, out.last_ms, out.agents = (int(v) for v in span[0])
        odometer = self._number("odometer_m")
        odo = self._read(
            f"SELECT min({odometer}), max({odometer}) FROM records "
            "WHERE vehicle = ? AND kind = 'speed'", (vehicle,))
        if odo and odo[0][0] is not None:
            out.odometer_m = (int(odo[0][0]), int(odo[0][1]))
        people = self._read(
            f"SELECT coalesce(sum({self._number('boarded')}), 0), "
            f"coalesce(sum({self._number('alighted')}), 0) FROM records "
            "WHERE vehicle = ? AND kind = 'door'", (vehicle,))
        if people:
            out.boarded, out.alighted = int(people[0][0]), int(people[0][1])
        raw_agents = {str(a) for (a,) in self._read(
            "SELECT DISTINCT agent FROM records WHERE vehicle = ? AND kind IN ('speed', 'position')",
            (vehicle,))}
        _add_packed(out, store_disc.vehicle_rows(self, vehicle), raw_agents)  # type: ignore[arg-type]
        return out

    # -- what the pages read (collector/web/dayview.py, tripview.py) ----------------------------------------
    def events(self, vehicle: str, since_ms: int, until_ms: int, exact: bool = True) -> list[str]:
        """A vehicle's records other than the ``speed``/``position`` samples (driver, trip, door,
        device, incident, report) with since <= ts < until, in (ts, seq) order: the partial index
        ``idx_records_events`` reads them without touching the samples. ``exact=False`` (the
        pages): a compacted day's are rebuilt from its columns (collector/disc_columns.py),
        without a ``prev`` the codec dropped, instead of decoding the day whole."""
        # no ORDER BY: with one the planner walks idx_records_vehicle_ts_ms_seq (it gives the
        # order) and reads every sample; these few rows are sorted here instead
        rows = self._read(
            "SELECT ts_ms, seq, id, record FROM records WHERE vehicle = ? AND ts_ms >= ? "
            "AND ts_ms < ? AND kind NOT IN ('speed', 'position')", (vehicle, since_ms, until_ms))
        if exact:
            rows += [(r.ts_ms, r.seq, -1, r.text) for r in self._packed(vehicle, since_ms, until_ms)
                     if r.kind not in ("speed", "position")]
        else:
            rows += self._packed_events(vehicle, since_ms, until_ms)
        return [str(row[3]) for row in sorted(rows, key=lambda r: (int(r[0]), int(r[1]), int(r[2])))]

    def _packed_events(self, vehicle: str, since_ms: int,
                       until_ms: int) -> list[tuple[int, int, int, str]]:
        """(ts ms, seq, -1, text) of the compacted days' non-sample records, from their summaries
        (collector/disc_summary.py) or else their columns where the day can be read so."""
        out: list[tuple[int, int, int, str]] = []
        for day in store_disc.days(self, vehicle, since_ms, until_ms):  # type: ignore[arg-type]
            summary = disc_summary.read(self, day.vehicle, day.day)  # type: ignore[arg-type]
            if summary is not None:     # the day's events kept beside it (no columns decoded)
                out += [(ms, seq, -1, text) for ms, seq, text in summary.events
                        if since_ms <= ms < until_ms]
                continue
            cols = disc_columns.day_columns(self, day.vehicle, day.day)
            if cols is None:
                out += [(r.ts_ms, r.seq, -1, r.text) for r in store_disc.day_records(
                    self, [day], since_ms, until_ms)  # type: ignore[arg-type]
                    if r.kind not in ("speed", "position")]
                continue
            out += [(ts_to_ms(rec["ts"]), int(rec.get("seq") or 0), -1,
                     orjson.dumps(rec).decode()) for rec in cols.events(since_ms, until_ms)]
        return out

    def _packed_speeds(self, vehicle: str, kind: str, since_ms: int,
                       until_ms: int) -> list[tuple[int, float]]:
        """(ts ms, kmh) of the compacted days' ``kind`` records carrying a speed, read from the
        days' ``ts``, ``kind`` and ``kmh`` columns only (collector/disc_columns.py) where the day
        can be read so, else from the day decoded whole."""
        out: list[tuple[int, float]] = []
        for day in store_disc.days(self, vehicle, since_ms, until_ms):  # type: ignore[arg-type]
            cols = disc_columns.day_columns(self, day.vehicle, day.day)
            if cols is None:
                for r in store_disc.day_records(self, [day], since_ms,  # type: ignore[arg-type]
                                                until_ms):
                    kmh = orjson.loads(r.text).get("kmh") if r.kind == kind else None
                    if kmh is not None:
                        out.append((r.ts_ms, float(kmh)))
                continue
            out += cols.speeds(kind, since_ms, until_ms)
        return out

    def _packed(self, vehicle: str, since_ms: int, until_ms: int) -> list[store_disc.DayRow]:
        """The compacted days' rows of a vehicle with since <= ts < until, in (ts, seq) order
        (collector/store_disc.py)."""
        return list(store_disc.vehicle_rows(self, vehicle, since_ms, until_ms))  # type: ignore[arg-type]

    def samples(self, vehicle: str, kind: str, since_ms: int, until_ms: int) -> list[str]:
        """A vehicle's records of one ``kind`` with since <= ts < until, in (ts, seq) order."""
        rows = self._read(
            "SELECT ts_ms, seq, record FROM records WHERE vehicle = ? AND ts_ms >= ? AND ts_ms < ? "
            "AND kind = ? ORDER BY ts_ms, seq, id", (vehicle, since_ms, until_ms, kind))
        packed = [(r.ts_ms, r.seq, r.text) for r in self._packed(vehicle, since_ms, until_ms)
                  if r.kind == kind]
        if packed:
            rows = list(heapq.merge(rows, packed, key=lambda r: (int(r[0]), int(r[1]))))
        return [str(row[2]) for row in rows]

    def speeds(self, vehicle: str, kind: str, since_ms: int, until_ms: int) -> list[tuple[int, float]]:
        """(ts ms, ``kmh``) of a vehicle's ``speed`` or ``position`` records with since <= ts <
        until that carry a speed, in ts order (:meth:`speed_columns` as pairs)."""
        ts, kmh = self.speed_columns(vehicle, kind, since_ms, until_ms)
        return list(zip(ts, kmh, strict=True))

    def speed_columns(self, vehicle: str, kind: str, since_ms: int,
                      until_ms: int) -> tuple[list[int], list[float]]:
        """The ts (ms) and the ``kmh`` of a vehicle's ``speed`` or ``position`` records with
        since <= ts < until that carry a speed, in ts order, as two lists. The number is the
        rows' ``kmh`` column (for speed records on SQLite read from the index
        ``idx_records_speed``), a float, so a day of 1 Hz samples is not parsed at all; the two lists hold no
        container, so reading a day (86,400 rows) does not drive the garbage collector through
        the collector's heap (in a process holding decoded days, a full collection took up to
        ~180 ms: bench.disc_page)."""
        if kind not in ("speed", "position"):
            raise ValueError(f"speeds of {kind!r} records: only speed and position carry kmh")
        # the kind as a literal, so that the partial index idx_records_speed serves speed rows;
        # kmh: the sample's km/h kept at insert (migration 022_records_kmh), a float on both
        # backends, read from that index on SQLite, from the row without parsing its JSON else
        ts, speeds = self._read_pairs(
            "SELECT ts_ms, kmh FROM records WHERE vehicle = ? AND ts_ms >= ? AND ts_ms < ? "
            f"AND kind = '{kind}' ORDER BY ts_ms", (vehicle, since_ms, until_ms))
        if None in speeds:  # records without a speed (a position without kmh): left out
            kept = [(ms, v) for ms, v in zip(ts, speeds, strict=True) if v is not None]
            ts, speeds = [ms for ms, _ in kept], [v for _, v in kept]
        packed = self._packed_speeds(vehicle, kind, since_ms, until_ms)
        if packed:
            merged = list(heapq.merge(zip(ts, speeds, strict=True), packed, key=lambda r: r[0]))
            ts, speeds = [ms for ms, _ in merged], [v for _, v in merged]
        return ts, speeds

    def has_samples(self, vehicle: str, since_ms: int, until_ms: int) -> bool:
        """Whether a vehicle has ``speed`` or ``position`` rows with since <= ts < until (a
        compacted day has none unless a late one reopened it)."""
        return bool(self._read(
            "SELECT 1 FROM records WHERE vehicle = ? AND ts_ms >= ? AND ts_ms < ? "
            "AND kind IN ('speed', 'position') LIMIT 1", (vehicle, since_ms, until_ms)))

    def latest(self, vehicle: str, kind: str, before_ms: int | None = None) -> str | None:
        """A vehicle's latest record of ``kind`` (with ts < ``before``), or None."""
        hi = (1 << 62) if before_ms is None else before_ms
        extra = "" if kind in ("speed", "position") else " AND kind NOT IN ('speed', 'position')"
        rows = self._read(
            "SELECT ts_ms, seq, record FROM records WHERE vehicle = ? AND ts_ms < ? AND kind = ?"
            f"{extra} ORDER BY ts_ms DESC, seq DESC, id DESC LIMIT 1", (vehicle, hi, kind))
        best = (int(rows[0][0]), int(rows[0][1]), str(rows[0][2])) if rows else None
        # the compacted days after the row found (newest first), until one has a record of kind
        for day in reversed(store_disc.days(self, vehicle, best[0] if best else None,  # type: ignore[arg-type]
                                            hi)):
            found = [(r.ts_ms, r.seq, r.text) for r in store_disc.day_rows(self, day)  # type: ignore[arg-type]
                     if r.kind == kind and r.ts_ms < hi]
            if found:
                last = max(found, key=lambda r: (r[0], r[1]))
                if best is None or (last[0], last[1]) > (best[0], best[1]):
                    best = last
                break
        return best[2] if best else None


def _add_packed(out: VehicleSummary, rows: Any, agents: set[str]) -> None:
    """Fold the compacted days' rows into a vehicle's summary (``agents``: those of its rows)."""
    kinds = Counter(dict(out.kinds))
    lo, hi = out.first_ms, out.last_ms
    odo = out.odometer_m
    any_row = False
    for row in rows:
        any_row = True
        kinds[row.kind] += 1
        if row.kind in ("speed", "position"):
            agents.add(row.agent)
            lo = row.ts_ms if lo is None else min(lo, row.ts_ms)
            hi = row.ts_ms if hi is None else max(hi, row.ts_ms)
        if row.kind in ("speed", "door"):
            rec = orjson.loads(row.text)
            if row.kind == "speed" and isinstance(rec.get("odometer_m"), int | float):
                m = int(rec["odometer_m"])
                odo = (m, m) if odo is None else (min(odo[0], m), max(odo[1], m))
            if row.kind == "door":
                out.boarded += int(rec.get("boarded") or 0)
                out.alighted += int(rec.get("alighted") or 0)
    if not any_row:
        return
    out.kinds = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    out.first_ms, out.last_ms, out.odometer_m = lo, hi, odo
    out.agents = len(agents)
