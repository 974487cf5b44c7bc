"""The compaction job: vehicle-days older than a few days become one ``disc_days`` row each
(docs/collector.md, "The digital disc at rest"; the codec is :mod:`collector.disc`, the reading
back :mod:`collector.store_disc`).

- A day is a whole local day in the time zone of the vehicle's profile (registry
  ``vehicles[].profile``, else the default), as retention counts them (collector/retention.py).
  A day D is compacted on local day T when T - D > N, N = ``[retention] compact_after_days``
  (default :data:`DEFAULT_AFTER_DAYS`): with N = 2, on 3 December the days up to 30 November.
- Per day: its rows are read and encoded outside any transaction; then ONE short transaction
  checks that the rows did not change meanwhile, writes the day, reads the blob back from the
  store and decodes it (it must give exactly the texts read, in order), and only then deletes
  the rows (the delete guard lets a record go only where a disc day covers it). A day that
  changed or does not decode back is left as rows (and logged). The ingest waits at most one
  day's transaction; the job pauses between two days.
- The day's chain links are folded into its row (:func:`fold`) once the live verifier has
  walked them: the hash of the last record of each unbroken stretch of each agent's chain is
  kept, the links go (they are most of a compacted day's bytes otherwise). Until then, the
  hashes the records' rows carried become ``stored`` link rows (collector/store_chain.py).
- A day with rows and a disc row already (a record that arrived while another collector
  compacted it) is merged: its disc records and its rows, one day again.
- Operator entries (agent ``operator``, collector/entries.py) are never compacted: a handful a
  day, each looked up by seq when the next is signed.
- With several collectors on one PostgreSQL store, one compaction at a time (an advisory lock,
  as the prune).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Final

import orjson

from collector import disc, disc_summary, speed_minutes, store_disc
from collector.registry import Registry
from collector.retention import DailyJob, advisory_lease, cutoff_ms, local_day, vehicle_profile
from collector.rules.profile import DEFAULT_PROFILE, Profile, local_midnight_ms
from collector.store import Store
from collector.store_chain import INSERT_LINK
from collector.store_disc import INSERT_DAY, DayRow
from protocols.chain import try_hash

log = logging.getLogger(__name__)

#: Whole local days a vehicle-day stays as rows before it is compacted (late records, history
#: downloads and resends arrive within hours; two days leave them room, and the day before
#: yesterday is still read from rows by anyone looking at "yesterday" across midnight).
DEFAULT_AFTER_DAYS: Final = 2
#: PostgreSQL advisory lock key of the compaction (one collector at a time on a shared store).
COMPACT_LOCK: Final = 0x46524F5444  # "FROTD"
#: Operator entries (collector/entries.py) stay rows: few, signed by the collector, looked up by
#: seq when the next is written.
_AGENTS: Final = "agent <> 'operator'"


@dataclass(frozen=True)
class DayCompacted:
    """One vehicle-day the job compacted (dry: would compact)."""

    vehicle: str
    day: str
    records: int
    raw_bytes: int
    blob_bytes: int
    merged: bool = False


class CompactionError(RuntimeError):
    """A day that changed while it was encoded, or does not decode back (left as rows)."""


def _day_bounds(day: date, profile: Profile) -> tuple[int, int]:
    return (local_midnight_ms(day, profile.tz),
            local_midnight_ms(day + timedelta(days=1), profile.tz))


def candidate_days(store: Store, vehicle: str, before_ms: int,
                   profile: Profile) -> Iterator[tuple[date, int, int]]:
    """The local days of the vehicle's rows with ts < ``before`` (day, start, end), oldest
    first, each found by one indexed look-up."""
    at = -(1 << 62)
    while True:
        rows = store._read("SELECT min(ts_ms) FROM records WHERE vehicle = ? AND ts_ms >= ? "
                           f"AND ts_ms < ? AND {_AGENTS}", (vehicle, at, before_ms))
        if not rows or rows[0][0] is None:
            return
        day = local_day(int(rows[0][0]), profile)
        start, end = _day_bounds(day, profile)
        if end > before_ms:
            return
        yield day, start, end
        at = end


def _texts_of(rows: list[tuple[int, str, int]], old: list[DayRow]) -> tuple[list[str], list[int]]:
    """The day's texts and arrivals in (ts, seq, row) order, disc records first among equals;
    a row already in the disc records (same agent and seq) counts once when identical."""
    have = {(r.agent, r.seq): r.text for r in old}
    merged: list[tuple[int, int, int, str, int]] = [
        (r.ts_ms, r.seq, -1, r.text, r.received_ms) for r in old]
    for row_id, text, received_ms in rows:
        rec = orjson.loads(text)
        key = (str(rec.get("agent")), int(rec.get("seq") or 0))
        if key in have:
            if have[key] != text:
                raise CompactionError(f"{key[0]} seq {key[1]} differs from its compacted copy")
            continue
        merged.append((int(store_ts(rec)), key[1], row_id, text, received_ms))
    merged.sort(key=lambda m: (m[0], m[1], m[2]))
    return [m[3] for m in merged], [m[4] for m in merged]


def store_ts(rec: dict[str, object]) -> int:
    """A record's device time in ms."""
    from protocols.records import ts_to_ms

    return ts_to_ms(str(rec["ts"]))


def compact_day(store: Store, vehicle: str, day: date, start: int, end: int, *, now_ms: int,
                dry_run: bool = False, stop_kmh: float | None = None) -> DayCompacted | None:
    """Compact one vehicle-day (see the module docstring); None when it has no rows. With
    ``stop_kmh``, the row gets the summary the *Disco do dia* reads (collector/disc_summary.py),
    in the same transaction."""
    found = store._read(
        "SELECT id, record, received_ms, agent, seq, hash, prev FROM records WHERE vehicle = ? "
        f"AND ts_ms >= ? AND ts_ms < ? AND {_AGENTS} ORDER BY ts_ms, seq, id",
        (vehicle, start, end))
    if not found:
        return None
    rows = [(int(i), str(t), int(r)) for i, t, r, _, _, _, _ in found]
    # the chain hashes the rows carry (store_chain.py): links again if the day does not fold
    hashed = [(vehicle, str(a), int(q), str(h), p, "stored", int(r))
              for _, _, r, a, q, h, p in found if h is not None]
    name = day.isoformat()
    existing = [d for d in store_disc.days(store, vehicle, start, end) if d.day == name]
    old = store_disc.day_rows(store, existing[0]) if existing else []
    texts, received = _texts_of(rows, old)
    raw_bytes = sum(len(t) for _, t, _ in rows)
    blob = disc.encode_day(texts)
    if dry_run:
        return DayCompacted(vehicle, name, len(texts), raw_bytes, len(blob), bool(existing))
    packed = store_disc.pack_received(received)
    first = orjson.loads(texts[0])
    last = orjson.loads(texts[-1])
    ids = [(i,) for i, _, _ in rows]
    with _gate(store) as tx:
        now = store._query("SELECT count(*), max(id) FROM records WHERE vehicle = ? AND "
                           f"ts_ms >= ? AND ts_ms < ? AND {_AGENTS}", (vehicle, start, end))
        if int(now[0][0]) != len(rows) or int(now[0][1]) != max(i for i, _, _ in rows):
            raise CompactionError(f"{vehicle} {name}: rows changed while encoding, left as rows")
        values = (vehicle, name, start, end, len(texts), store_ts(first), store_ts(last),
                  try_hash(first), try_hash(last), disc.VERSION, now_ms)
        if existing:
            store._executemany(tx, (
                "UPDATE disc_days SET records = ?, first_ms = ?, last_ms = ?, first_hash = ?, "
                "last_hash = ?, codec = ?, made_ms = ?, blob = ?, received = ?, summary = NULL "
                "WHERE vehicle = ? AND day = ?"), [(*values[4:], blob, packed, vehicle, name)])
        else:
            store._executemany(tx, INSERT_DAY, [(*values, blob, packed)])
        back = store._query("SELECT blob, received FROM disc_days WHERE vehicle = ? AND day = ?",
                            (vehicle, name))
        if disc.decode_day(bytes(back[0][0])) != texts or \
                store_disc.unpack_received(bytes(back[0][1])) != received:
            raise CompactionError(f"{vehicle} {name}: the day does not decode back, left as rows")
        if existing:   # the compacted records' links, if folded, are rows again first
            store_disc.unfold(store, tx, existing[0], old, "stored")
        if not fold(store, tx, vehicle, name, texts) and hashed:
            store._executemany(tx, INSERT_LINK, hashed)
        if stop_kmh is not None:
            disc_summary.write(store, tx, vehicle, name, texts, start, end, stop_kmh)
        store._executemany(tx, "DELETE FROM records WHERE id = ?", ids)
        speed_minutes.forget(store, tx, vehicle, start, end)
        store._executemany(tx, "DELETE FROM disc_reopened WHERE vehicle = ? AND day = ?",
                           [(vehicle, name)])
    store.disc_watermarks.ends[vehicle] = max(end, store.disc_watermarks.ends.get(vehicle, end))
    return DayCompacted(vehicle, name, len(texts), raw_bytes, len(blob), bool(existing))


@contextmanager
def _gate(store: Store) -> Iterator[Any]:
    """One transaction in which the store lets the rows a compacted day covers be deleted
    (migration 012_disc)."""
    with store._lock, store._transaction() as tx:
        if store.dialect == "postgresql":
            store._executemany(tx, "SELECT set_config('frota.compact', 'on', true)", [()])
        else:
            store._executemany(tx, "INSERT INTO compact_gate (opened_ms) VALUES (?)", [(0,)])
        yield tx
        if store.dialect != "postgresql":
            store._executemany(tx, "DELETE FROM compact_gate", [()])


def fold(store: Store, tx: Any, vehicle: str, day: str, texts: list[str]) -> bool:
    """Fold the day's chain links into its row (migration 016_disc_links) when every record has
    its hash as received (in its row, or a ``stored`` link: the same hash), the live verifier
    has walked past the day (its ``chain_state``) and no checkpoint of the day waits for
    verification: the row keeps the hash of the last record of each unbroken stretch of each
    agent's chain, the link rows go (with the records' rows). Whether it folded; when not, the
    caller keeps the hashes of the rows it deletes as ``stored`` links."""
    recs = [orjson.loads(t) for t in texts]
    by_agent: dict[str, dict[int, dict[str, Any]]] = {}
    for rec in recs:
        by_agent.setdefault(str(rec.get("agent")), {})[int(rec.get("seq") or 0)] = rec
    ends: dict[str, list[tuple[int, str]]] = {}
    for agent, mine in by_agent.items():
        low, high = min(mine), max(mine)
        walked = store._query("SELECT seq FROM chain_state WHERE vehicle = ? AND agent = ?",
                              (vehicle, agent))
        waiting = store._query("SELECT count(*) FROM checkpoints WHERE vehicle = ? AND agent = ? "
                               "AND state = 'new' AND seq <= ?", (vehicle, agent, high))
        if not walked or int(walked[0][0]) < high or int(waiting[0][0]):
            return False
        # the hash received for each: its row's (being compacted), else its link's
        links = {int(q): (str(h), "stored") for q, h in store._query(
            "SELECT seq, hash FROM records WHERE vehicle = ? AND agent = ? AND seq >= ? "
            "AND seq <= ? AND hash IS NOT NULL", (vehicle, agent, low, high))}
        links.update((int(q), (str(h), str(st))) for q, h, st in store._query(
            "SELECT seq, hash, state FROM links WHERE vehicle = ? AND agent = ? AND seq >= ? "
            "AND seq <= ?", (vehicle, agent, low, high)))
        hashes = {seq: try_hash(rec) for seq, rec in mine.items()}
        if any(links.get(seq) != (hashes[seq], "stored") for seq in mine):
            return False
        ends[agent] = [(seq, str(hashes[seq])) for seq in sorted(mine)
                       if seq + 1 not in mine or mine[seq + 1].get("prev") != hashes[seq]]
    store._executemany(tx, "UPDATE disc_days SET links = ? WHERE vehicle = ? AND day = ?",
                       [(store_disc.pack_ends(ends), vehicle, day)])
    store._executemany(tx, "DELETE FROM links WHERE vehicle = ? AND agent = ? AND seq = ?",
                       [(vehicle, agent, seq) for agent, mine in by_agent.items() for seq in mine])
    return True


def compact(store: Store, registry: Registry | None, profiles: Mapping[str, Profile], *,
            now_ms: int, after_days: int = DEFAULT_AFTER_DAYS, default: str = DEFAULT_PROFILE,
            dry_run: bool = False, pause_s: float = 0.05,
            vehicles: list[str] | None = None) -> list[DayCompacted]:
    """Compact every vehicle-day older than ``after_days`` whole local days; what was (dry:
    would be) compacted. A day that fails is logged and left as rows."""
    out: list[DayCompacted] = []
    # the pages' stop speed (collector/web/context.py, Web.stop_kmh): the summary's time moving
    stop_kmh = profiles[DEFAULT_PROFILE].stop_kmh if DEFAULT_PROFILE in profiles else None
    names = vehicles if vehicles is not None else sorted(
        str(r[0]) for r in store._read("SELECT DISTINCT vehicle FROM records"))
    for vehicle in names:
        profile = vehicle_profile(vehicle, registry, profiles, default)
        before = cutoff_ms(local_day(now_ms, profile), after_days, profile)
        for day, start, end in list(candidate_days(store, vehicle, before, profile)):
            try:
                done = compact_day(store, vehicle, day, start, end, now_ms=now_ms,
                                   dry_run=dry_run, stop_kmh=stop_kmh)
            except CompactionError as err:
                log.warning("compact: %s", err)
                continue
            if done is not None:
                out.append(done)
                if not dry_run:
                    time.sleep(pause_s)  # let the ingest's next commit in between two days
    return out


def summarize_missing(store: Store, profiles: Mapping[str, Profile], *,
                      budget_s: float | None = None, pause_s: float = 0.05,
                      dry_run: bool = False) -> tuple[int, int]:
    """Give the days compacted before migration ``017_disc_summary`` (no summary) the summary
    the *Disco do dia* reads (:func:`collector.disc_summary.backfill`, newest first, for
    ``budget_s`` seconds; None: all); (days summarized, days still without one)."""
    if DEFAULT_PROFILE not in profiles:
        return 0, 0
    return disc_summary.backfill(store, profiles[DEFAULT_PROFILE].stop_kmh, budget_s=budget_s,
                                 pause_s=pause_s, dry_run=dry_run)


def rebuild_minutes(store: Store, profiles: Mapping[str, Profile]) -> int:
    """Give the vehicles whose rows were stored before migration ``020_speed_minutes`` the
    per-minute summary of their rows the *Disco do dia* reads (collector/speed_minutes.py); how
    many vehicles. Each vehicle is one transaction (about a second for three days at 1 Hz)."""
    if DEFAULT_PROFILE not in profiles:
        return 0
    waiting = speed_minutes.pending(store)
    for vehicle in waiting:
        speed_minutes.rebuild(store, vehicle, profiles[DEFAULT_PROFILE].stop_kmh)
    return len(waiting)


def compact_lease(store: Store) -> AbstractContextManager[bool]:
    """:func:`retention.advisory_lease` of the compaction: one collector at a time."""
    return advisory_lease(store, COMPACT_LOCK)


class DailyCompaction(DailyJob):
    """The collector's compaction, once a day (the first two hours after start), under the
    lease."""

    def __init__(self, run_once: Callable[[], list[DayCompacted]], store: Store,
                 every_s: float = 86_400.0, first_after_s: float = 7_200.0) -> None:
        def once() -> str:
            done = run_once()
            return (f"{len(done)} vehicle-days compacted "
                    f"({sum(d.records for d in done)} records)")

        super().__init__("compact", COMPACT_LOCK, once, store, every_s, first_after_s)

