"""Per minute, what the *Disco do dia* draws of a vehicle's speed samples still stored as rows
(migration ``020_speed_minutes``; docs/pages.md, "Storage").

A day as rows (today, yesterday: before the compaction job makes it one ``disc_days`` row with
its summary, collector/disc_summary.py) used to be drawn from its 86,400 speed rows at 1 Hz, read
through Python's database driver at each view (~60-170 ms of a 200-370 ms page on a loaded
host). The ingest now keeps, in the transaction that stores the records, one row per vehicle,
sample kind (``speed``, ``position``) and UTC minute (a local day's minutes are UTC minutes: every
zone's offset is whole minutes) holding what the page's trace (collector/web/dayview.py,
``_trace_columns``) takes from the minute's samples:

- ``n``, ``max_kmh`` with ``max_ts`` (its first sample), ``min_kmh``, ``first_ts``, ``last_ts`` and
  ``last_kmh`` (where the next sample's step starts);
- ``incoming``: km/h × ms of the step into the minute's first sample from the sample before it
  (the step counts nothing when longer than :data:`GAP_MS` or not forward: docs/rules.md), and
  ``moving_in``, that step's ms when the sample before was at or above ``stop_kmh``;
- ``internal``: km/h × ms of the steps between the minute's samples, added in time order from 0.0,
  and ``moving``, their ms whose earlier sample was at or above ``stop_kmh``;
- ``stop_kmh``: the stop speed ``moving`` was judged at (the default profile's, the pages').

A day's distance is then the sum over its minutes, in order, of ``incoming + internal`` (the day's
first minute: ``internal`` alone — its step comes from the day before), the same additions in the
same order as the trace of the rows does them, so the page is the same to the last bit (tested).

Records arriving in time order (a bus online, or draining its buffer after an outage) extend the
vehicle's latest minute row: one read and one upsert per vehicle and kind in a batch. Anything
else — a sample older than or at the same instant as the latest one stored, a batch with a
record already stored — recomputes the minutes it touches and the minute after each from the
rows (a few minutes' rows). A day reopened by a late record (collector/store_disc.py) has its
minutes recomputed from its rows; a compacted day's minutes go with its rows, and the prune's
with theirs. A vehicle whose rows were stored before this migration is ``pending`` until
:func:`rebuild` summarizes its rows (``frota collector compact`` and the daily compaction job):
meanwhile, and for any other stop speed, the page reads the rows as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collector.store import Store

#: A sample holds until the next one, for at most this long (collector/web/dayview.py GAP_MS).
GAP_MS: Final = 60_000
MINUTE_MS: Final = 60_000
#: First key of the PostgreSQL advisory locks that serialize a vehicle's minutes (the two-key
#: space: apart from the single-key leases of the prune and the compaction).
LOCK_CLASS: Final = 19
KINDS: Final = ("speed", "position")
COLUMNS: Final = ("minute_ms", "n", "max_kmh", "max_ts", "min_kmh", "first_ts", "last_ts",
                  "last_kmh", "incoming", "moving_in", "internal", "moving", "stop_kmh")
UPSERT: Final = (
    f"INSERT INTO speed_minutes (vehicle, kind, {', '.join(COLUMNS)}) "
    f"VALUES (?, ?, {', '.join('?' * len(COLUMNS))}) ON CONFLICT (vehicle, kind, minute_ms) "
    f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in COLUMNS[1:])}"
)


@cache
def default_stop_kmh() -> float:
    """The stop speed the minutes are judged at: the pages' (the default profile's ``stop_kmh``,
    collector/web/context.py ``Web.stop_kmh``)."""
    from collector.rules.profile import DEFAULT_PROFILE, load_profiles

    return load_profiles()[DEFAULT_PROFILE].stop_kmh


@dataclass
class Minute:
    """One minute of a vehicle's samples of one kind (see the module docstring)."""

    minute_ms: int
    n: int
    max_kmh: float
    max_ts: int
    min_kmh: float
    first_ts: int
    last_ts: int
    last_kmh: float
    incoming: float
    moving_in: int
    internal: float
    moving: int
    stop_kmh: float


def step_ms(before_ms: int, ms: int) -> int:
    """The time a sample at ``before_ms`` holds until the next at ``ms``: 0 for a gap longer
    than :data:`GAP_MS` or a step that is not forward."""
    dt = ms - before_ms
    return dt if 0 < dt <= GAP_MS else 0


def extend(minutes: dict[int, Minute], last: tuple[int, float] | None,
           samples: Iterable[tuple[int, float]], stop_kmh: float) -> tuple[int, float] | None:
    """Add samples (in time order, each after ``last``, the sample before them) to ``minutes``
    (minute start -> Minute, changed in place); the last sample."""
    for ms, kmh in samples:
        start = ms - ms % MINUTE_MS
        row = minutes.get(start)
        if row is not None:
            dt = step_ms(row.last_ts, ms)
            row.internal = row.internal + row.last_kmh * dt
            if row.last_kmh >= stop_kmh:
                row.moving += dt
            row.n += 1
            if kmh > row.max_kmh:
                row.max_kmh, row.max_ts = kmh, ms
            if kmh < row.min_kmh:
                row.min_kmh = kmh
            row.last_ts, row.last_kmh = ms, kmh
        else:
            incoming, moving_in = 0.0, 0
            if last is not None:
                dt = step_ms(last[0], ms)
                incoming = last[1] * dt
                moving_in = dt if last[1] >= stop_kmh else 0
            minutes[start] = Minute(start, 1, kmh, ms, kmh, ms, ms, kmh, incoming, moving_in,
                                    0.0, 0, stop_kmh)
        last = (ms, kmh)
    return last


def _row(vehicle: str, kind: str, m: Minute) -> tuple[Any, ...]:
    return (vehicle, kind, m.minute_ms, m.n, m.max_kmh, m.max_ts, m.min_kmh, m.first_ts,
            m.last_ts, m.last_kmh, m.incoming, m.moving_in, m.internal, m.moving, m.stop_kmh)


def row_kmh(rec: dict[str, Any]) -> float | None:
    """The ``kmh`` column of a record's row (migration ``022_records_kmh``): a ``speed`` or
    ``position`` sample's km/h as a float, else None. It is the number the record's JSON holds
    (validated: an int or a float, never a bool) as ``CAST(json_extract(record, '$.kmh') AS
    REAL)`` reads it, kept at insert so that neither the index of speed rows nor a reader
    parses the JSON for it (tests/collector/test_store_kmh.py compares them)."""
    kind = rec["kind"]
    if kind != "speed" and kind != "position":
        return None
    kmh = rec.get("kmh")
    return float(kmh) if type(kmh) is float or type(kmh) is int else None


def _samples(store: Store, kind: str, vehicle: str, lo: int, hi: int) -> list[tuple[int, float]]:
    """(ms, km/h) of the vehicle's ``kind`` rows with lo <= ts < hi carrying a speed, in the
    order :meth:`Store.speed_columns` reads them (inside the writer's transaction)."""
    return [(int(ms), float(v)) for ms, v in store._query(
        "SELECT ts_ms, kmh FROM records WHERE vehicle = ? AND ts_ms >= ? AND ts_ms < ? "
        f"AND kind = '{kind}' ORDER BY ts_ms", (vehicle, lo, hi)) if v is not None]


def recompute(store: Store, tx: Any, vehicle: str, kind: str, lo: int, hi: int,
              stop_kmh: float) -> None:
    """Write again, from the rows, the vehicle's ``kind`` minutes starting in [lo, hi) (whole
    minutes), inside ``tx``."""
    samples = _samples(store, kind, vehicle, lo - GAP_MS, hi)
    before = [s for s in samples if s[0] < lo]
    minutes: dict[int, Minute] = {}
    extend(minutes, before[-1] if before else None, samples[len(before):], stop_kmh)
    store._executemany(tx, "DELETE FROM speed_minutes WHERE vehicle = ? AND kind = ? AND "
                       "minute_ms >= ? AND minute_ms < ?", [(vehicle, kind, lo, hi)])
    store._executemany(tx, UPSERT, [_row(vehicle, kind, m) for m in minutes.values()])


def _spans(starts: Iterable[int]) -> list[tuple[int, int]]:
    """Minute starts (each with the minute after it) as [lo, hi) spans, joined where they meet."""
    out: list[tuple[int, int]] = []
    for start in sorted(set(starts)):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], start + 2 * MINUTE_MS))
        else:
            out.append((start, start + 2 * MINUTE_MS))
    return out


def add(store: Store, tx: Any, groups: Sequence[Sequence[tuple[Any, ...]]],
        counts: Sequence[int], stop_kmh: float) -> None:
    """Inside the ingest's transaction, after ``groups`` (``records`` rows, :data:`RECORD_COLUMNS`
    order) were inserted, ``counts[i]`` of group i new: bring the minutes up to date."""
    by_key: dict[tuple[str, str], list[tuple[int, float]]] = {}
    resent: set[tuple[str, str]] = set()
    for rows, new in zip(groups, counts, strict=True):
        again = new != len(rows)
        for row in rows:
            if row[5] not in KINDS:
                continue
            key = (row[0], row[5])      # record_row's: vehicle and kind as str, ts_ms as int
            if again:
                resent.add(key)
            kmh = row[13]               # the kmh column, row_kmh's
            if kmh is not None:
                found = by_key.get(key)
                if found is None:
                    by_key[key] = [(row[4], kmh)]
                else:
                    found.append((row[4], kmh))
    busy = _try_serialize(store, {vehicle for vehicle, _ in by_key})
    for vehicle in sorted(busy):    # another collector's transaction holds its minutes
        mark_pending(store, tx, vehicle)
    by_key = {key: samples for key, samples in by_key.items() if key[0] not in busy}
    latest = _latest(store, [key for key in by_key if key not in resent])
    upserts: list[tuple[Any, ...]] = []
    for (vehicle, kind), samples in by_key.items():
        samples.sort(key=lambda s: s[0])
        if (vehicle, kind) not in resent:
            last = latest.get((vehicle, kind))
            if (last is None or samples[0][0] > last.last_ts) and \
                    all(a[0] < b[0] for a, b in pairwise(samples)) and \
                    (last is None or last.stop_kmh == stop_kmh):
                minutes = {} if last is None else {last.minute_ms: last}
                extend(minutes, None if last is None else (last.last_ts, last.last_kmh),
                       samples, stop_kmh)
                upserts += [_row(vehicle, kind, m) for m in minutes.values()]
                continue
        for lo, hi in _spans(ms - ms % MINUTE_MS for ms, _ in samples):
            recompute(store, tx, vehicle, kind, lo, hi, stop_kmh)
    if upserts:
        store._executemany(tx, UPSERT, upserts)


def _try_serialize(store: Store, vehicles: set[str]) -> set[str]:
    """On PostgreSQL, inside the ingest's transaction: take an advisory lock per vehicle until
    commit (two-key space :data:`LOCK_CLASS`), so that two collectors sharing the ingest never
    extend the same latest minute at once; the vehicles whose lock another transaction holds
    (returned) are not waited for — a stalled collector must not stall the others' ingest —
    but marked pending: their pages read the rows until :func:`rebuild`. SQLite has one writer."""
    if not vehicles or store.dialect != "postgresql":
        return set()
    return {str(v) for v, got in store._query(
        "SELECT v, pg_try_advisory_xact_lock(?, hashtext(v)) FROM "
        "(SELECT unnest(?::text[]) AS v ORDER BY 1) AS named", (LOCK_CLASS, sorted(vehicles)))
        if not got}


def _serialize(store: Store, vehicle: str) -> None:
    """:func:`_try_serialize`, waiting for the lock (the rebuild, a job's thread)."""
    if store.dialect == "postgresql":
        store._query("SELECT pg_advisory_xact_lock(?, hashtext(?))", (LOCK_CLASS, vehicle))


@cache
def _latest_sql(keys: int) -> str:
    one = (f"SELECT * FROM (SELECT vehicle, kind, {', '.join(COLUMNS)} FROM speed_minutes "
           "WHERE vehicle = ? AND kind = ? ORDER BY minute_ms DESC LIMIT 1) AS q{}")
    return " UNION ALL ".join(one.format(i) for i in range(keys))


def _latest(store: Store, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Minute]:
    """Inside the writer's transaction: the latest minute of each (vehicle, kind), in one
    statement per 200 keys (SQLite's compound SELECT holds at most 500 terms)."""
    out: dict[tuple[str, str], Minute] = {}
    for at in range(0, len(keys), 200):
        part = keys[at:at + 200]
        for row in store._query(_latest_sql(len(part)), tuple(v for key in part for v in key)):
            out[(str(row[0]), str(row[1]))] = Minute(*row[2:])
    return out


def reopened(store: Store, tx: Any, vehicle: str, lo: int, hi: int, stop_kmh: float) -> None:
    """A compacted day [lo, hi) made rows again (inside ``tx``): its minutes, and the minute
    after it, from the rows."""
    end = hi - hi % MINUTE_MS + MINUTE_MS
    for kind in KINDS:
        recompute(store, tx, vehicle, kind, lo - lo % MINUTE_MS, end + MINUTE_MS, stop_kmh)


def forget(store: Store, tx: Any, vehicle: str, lo: int, hi: int) -> None:
    """Inside ``tx``: the vehicle's minutes starting in [lo, hi) go (their rows went)."""
    store._executemany(tx, "DELETE FROM speed_minutes WHERE vehicle = ? AND minute_ms >= ? "
                       "AND minute_ms < ?", [(vehicle, lo, hi)])


def mark_pending(store: Store, tx: Any, vehicle: str) -> None:
    """Inside ``tx``: the vehicle's minutes are to be rebuilt from its rows (:func:`rebuild`)."""
    store._executemany(tx, "INSERT INTO speed_minutes_pending (vehicle) VALUES (?) "
                       "ON CONFLICT DO NOTHING", [(vehicle,)])


def pending(store: Store) -> list[str]:
    """Vehicles whose minutes are not kept yet (rows stored before migration 020)."""
    return sorted(str(v) for (v,) in store._read("SELECT vehicle FROM speed_minutes_pending"))


def is_pending(store: Store, vehicle: str) -> bool:
    """Whether a vehicle's minutes are not kept yet (its rows are read instead)."""
    return bool(store._read("SELECT 1 FROM speed_minutes_pending WHERE vehicle = ?", (vehicle,)))


def rebuild(store: Store, vehicle: str, stop_kmh: float) -> None:
    """Every minute of a vehicle's rows from the rows, in one transaction (the ingest waits for
    it: about a second for three days at 1 Hz); the vehicle is no longer pending."""
    with store._lock, store._transaction() as tx:
        _serialize(store, vehicle)
        store._executemany(tx, "DELETE FROM speed_minutes WHERE vehicle = ?", [(vehicle,)])
        for kind in KINDS:
            minutes: dict[int, Minute] = {}
            extend(minutes, None, _samples(store, kind, vehicle, -(1 << 62), 1 << 62), stop_kmh)
            store._executemany(tx, UPSERT, [_row(vehicle, kind, m) for m in minutes.values()])
        store._executemany(tx, "DELETE FROM speed_minutes_pending WHERE vehicle = ?",
                           [(vehicle,)])


def read_day(store: Store, vehicle: str, lo: int, hi: int,
             stop_kmh: float) -> tuple[str, list[Minute]] | None:
    """The source (``registrador``: speed samples, else ``gps``) and the minutes of a vehicle's
    day [lo, hi) as rows; None where they cannot stand for the rows: the vehicle pending, part of
    the period compacted, or minutes judged at another stop speed."""
    from collector import store_disc

    if is_pending(store, vehicle) or store_disc.days(store, vehicle, lo, hi):
        return None
    sql = (f"SELECT {', '.join(COLUMNS)} FROM speed_minutes WHERE vehicle = ? AND kind = ? "
           "AND minute_ms >= ? AND minute_ms < ? ORDER BY minute_ms")
    source = "registrador"
    rows = store._read(sql, (vehicle, "speed", lo, hi))
    if not rows:
        source, rows = "gps", store._read(sql, (vehicle, "position", lo, hi))
    minutes = [Minute(int(r[0]), int(r[1]), float(r[2]), int(r[3]), float(r[4]), int(r[5]),
                      int(r[6]), float(r[7]), float(r[8]), int(r[9]), float(r[10]), int(r[11]),
                      float(r[12])) for r in rows]
    if any(m.stop_kmh != stop_kmh for m in minutes):
        return None
    return source, minutes
