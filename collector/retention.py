"""How long the collector keeps records, and the one path that deletes them (docs/collector.md,
"Retention").

- The **minimum** is the law's, per profile (``[rules."retention.minimum"] minimum_days``: SP 365
  d, Decreto SP 29.913/1989 art. 61 §3; TO 90 d, Regulamento TO art. 66 §1; BA 365 d, its text
  states none). The operator's **keeping period** (``[retention] keep_days`` in the collector's
  configuration) may be longer, never shorter: a shorter one is refused at start, with the article.
- A record's age counts from its device time (``ts``), by whole days in the time zone of the
  vehicle's profile (registry ``vehicles[].profile``, else the collector's default profile): a
  record of local day D is deleted on local day T only when T - D > the keeping period, and never
  when T - D <= the minimum, whatever the configuration says.
- A legal hold (``collector/holds.py``) keeps its vehicle's period whatever its age.
- :func:`prune` deletes in short transactions of at most ``batch_rows`` records each (the ingest
  waits at most one batch), marks each pruned record's chain link ``pruned`` (its hash stays, so
  ``frota verify`` still walks the chain) and logs every run in ``prunes``. A compacted day
  (collector/store_disc.py) past the period goes whole, one per transaction (its row deleted,
  its records' links marked); one a hold overlaps is kept whole. The store refuses any
  other DELETE of records (a trigger, migration ``008_retention``).
- With several collectors on one PostgreSQL store, one prune at a time: an advisory lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Final

from collector import speed_minutes, store_disc
from collector.registry import Registry
from collector.rules.profile import DEFAULT_PROFILE, Profile, local_midnight_ms
from collector.store import Store
from collector.store_chain import INSERT_LINK
from protocols.records import now_ms

log = logging.getLogger(__name__)

#: The rule whose profile section holds the minimum.
RULE: Final = "retention.minimum"
#: PostgreSQL advisory lock key of the prune (one collector at a time on a shared store).
PRUNE_LOCK: Final = 0x46524F5441  # "FROTA"
DAY_MS: Final = 86_400_000


class RetentionError(ValueError):
    """A keeping period shorter than the law's minimum; the message cites the article."""


@dataclass(frozen=True)
class Policy:
    """The retention of one profile: the law's minimum and the period actually kept."""

    profile: str
    minimum_days: int
    keep_days: int
    basis: tuple[str, ...]

    @property
    def article(self) -> str:
        """The article(s) of the minimum, or what the profile says when its text has none."""
        return ", ".join(self.basis) if self.basis else f"profile {self.profile}: no period " \
            "stated in its text, one year kept"


def policy(profile: Profile, keep_days: int | None) -> Policy:
    """The retention under ``profile`` with the configured keeping period (None: the minimum).
    Raises RetentionError when ``keep_days`` is shorter than the minimum."""
    rule = profile.rule(RULE)
    minimum = int(rule.params.minimum_days)
    pol = Policy(profile.name, minimum, minimum if keep_days is None else keep_days, rule.basis)
    if pol.keep_days < minimum:
        raise RetentionError(
            f"retention.keep_days: {keep_days} days is shorter than the minimum of {minimum} days "
            f"under profile {profile.name} ({pol.article})"
        )
    return pol


def profiles_in_use(registry: Registry | None, default: str = DEFAULT_PROFILE) -> list[str]:
    """The default profile and every vehicle's home profile, sorted."""
    names = {default}
    if registry is not None:
        names |= {v.profile for v in registry.vehicles.values() if v.profile}
    return sorted(names)


def check_keep_days(keep_days: int | None, registry: Registry | None,
                    profiles: Mapping[str, Profile], default: str = DEFAULT_PROFILE) -> None:
    """Refuse (RetentionError) a keeping period shorter than the minimum of any profile in use."""
    for name in profiles_in_use(registry, default):
        if name in profiles:
            policy(profiles[name], keep_days)


def vehicle_profile(vehicle: str, registry: Registry | None, profiles: Mapping[str, Profile],
                    default: str = DEFAULT_PROFILE) -> Profile:
    """The vehicle's home profile (registry ``vehicles[].profile``), else the default."""
    known = registry.vehicles.get(vehicle) if registry is not None else None
    name = known.profile if known is not None and known.profile else default
    return profiles.get(name) or profiles[default]


def local_day(ms: int, profile: Profile) -> date:
    """The local calendar day of an instant in the profile's zone."""
    return datetime.fromtimestamp(ms / 1000, profile.tz).date()


def cutoff_ms(today: date, days: int, profile: Profile) -> int:
    """The first instant kept on local day ``today`` when ``days`` whole days are kept: the
    start of local day ``today - days`` (a record of that day is exactly ``days`` old)."""
    return local_midnight_ms(today - timedelta(days=days), profile.tz)


@dataclass(frozen=True)
class VehiclePrune:
    """What a prune did (or, dry, would do) for one vehicle."""

    vehicle: str
    profile: str
    keep_days: int
    before_ms: int
    deleted: int
    held: int


@contextmanager
def _gate(store: Store) -> Iterator[Any]:
    """One transaction in which the store lets records be deleted (migration 008_retention)."""
    with store._lock, store._transaction() as tx:
        if store.dialect == "postgresql":
            store._executemany(tx, "SELECT set_config('frota.prune', 'on', true)", [()])
        else:
            store._executemany(tx, "INSERT INTO prune_gate (opened_ms) VALUES (?)", [(0,)])
        yield tx
        if store.dialect != "postgresql":
            store._executemany(tx, "DELETE FROM prune_gate", [()])


_HELD = ("EXISTS (SELECT 1 FROM holds h WHERE h.vehicle = records.vehicle AND "
         "h.released_ms IS NULL AND records.ts_ms >= h.since_ms AND records.ts_ms < h.until_ms)")


def _disc_held(store: Store, day: store_disc.DiscDay) -> bool:
    """Whether an active hold overlaps a compacted day (the day is then kept whole)."""
    return bool(store._read(
        "SELECT 1 FROM holds WHERE vehicle = ? AND released_ms IS NULL AND since_ms <= ? "
        "AND until_ms > ?", (day.vehicle, day.last_ms, day.first_ms)))


def _prune_vehicle(store: Store, vehicle: str, before_ms: int, batch_rows: int, dry_run: bool,
                   pause_s: float) -> tuple[int, int]:
    """Delete the vehicle's unheld records with ts < ``before_ms``; (deleted, held)."""
    held = int(store._read(
        f"SELECT count(*) FROM records WHERE vehicle = ? AND ts_ms < ? AND {_HELD}",
        (vehicle, before_ms))[0][0])
    days = [d for d in store_disc.days(store, vehicle, None, before_ms) if d.last_ms < before_ms]
    held_days = [d for d in days if _disc_held(store, d)]
    held += sum(d.records for d in held_days)
    days = [d for d in days if d not in held_days]
    if dry_run:
        count = int(store._read(
            f"SELECT count(*) FROM records WHERE vehicle = ? AND ts_ms < ? AND NOT {_HELD}",
            (vehicle, before_ms))[0][0])
        return count + sum(d.records for d in days), held
    deleted = 0
    for day in days:   # a compacted day goes whole: its row, its records' links marked pruned
        with _gate(store) as tx:
            packed = store_disc.day_rows(store, day, query=True)
            store_disc.unfold(store, tx, day, packed, "pruned")  # folded links: rows again
            store._executemany(
                tx, "UPDATE links SET state = 'pruned' WHERE vehicle = ? AND agent = ? "
                "AND seq = ? AND state = 'stored'", [(vehicle, r.agent, r.seq) for r in packed])
            store._executemany(tx, "DELETE FROM disc_days WHERE vehicle = ? AND day = ?",
                               [(vehicle, day.day)])
        deleted += len(packed)
        time.sleep(pause_s)
    while True:
        with _gate(store) as tx:
            rows = store._query(
                f"SELECT id, agent, seq, hash, prev, received_ms FROM records WHERE vehicle = ? "
                f"AND ts_ms < ? AND NOT {_HELD} ORDER BY ts_ms LIMIT ?",
                (vehicle, before_ms, batch_rows))
            if rows:
                store._executemany(tx, "DELETE FROM records WHERE id = ?",
                                   [(row[0],) for row in rows])
                # the hash stays in the chain: frota verify counts it as a hash-only entry
                # (the row's hash as a pruned link; a record's link, if it had one, marked)
                hashed = [(vehicle, agent, seq, digest, prev, "pruned", received)
                          for _, agent, seq, digest, prev, received in rows if digest is not None]
                if hashed:
                    store._executemany(tx, INSERT_LINK, hashed)
                store._executemany(
                    tx, "UPDATE links SET state = 'pruned' WHERE vehicle = ? AND agent = ? "
                    "AND seq = ? AND state = 'stored'",
                    [(vehicle, row[1], row[2]) for row in rows])
        deleted += len(rows)
        if len(rows) < batch_rows:
            with store._lock, store._transaction() as tx:   # their minutes (the Disco do dia's)
                speed_minutes.forget(store, tx, vehicle, -(1 << 62), before_ms)
                if held:    # the held rows' minutes again from the rows
                    speed_minutes.mark_pending(store, tx, vehicle)
            return deleted, held
        time.sleep(pause_s)  # let the ingest's next commit in between two batches


def prune(store: Store, registry: Registry | None, profiles: Mapping[str, Profile],
          keep_days: int | None, *, now_ms: int, default: str = DEFAULT_PROFILE,
          batch_rows: int = 1000, dry_run: bool = False, pause_s: float = 0.01) -> list[VehiclePrune]:
    """Delete every vehicle's records older than its keeping period (never younger than its
    profile's minimum), except held periods; what was (dry: would be) deleted per vehicle."""
    out: list[VehiclePrune] = []
    for vehicle in store.vehicle_ids():
        profile = vehicle_profile(vehicle, registry, profiles, default)
        pol = policy(profile, None)
        keep = max(pol.minimum_days, keep_days if keep_days is not None else 0)
        before = cutoff_ms(local_day(now_ms, profile), keep, profile)
        deleted, held = _prune_vehicle(store, vehicle, before, batch_rows, dry_run, pause_s)
        if deleted and not dry_run:
            store.apply([("INSERT INTO prunes (vehicle, before_ms, deleted, done_ms) "
                          "VALUES (?, ?, ?, ?)", [(vehicle, before, deleted, now_ms)])])
        out.append(VehiclePrune(vehicle, profile.name, keep, before, deleted, held))
    return out


@contextmanager
def advisory_lease(store: Store, key: int) -> Iterator[bool]:
    """True when this process may run the job of lock ``key`` now: always on SQLite (one
    writer); on PostgreSQL when it holds that advisory lock (released on exit), False while
    another collector runs the job."""
    if store.dialect != "postgresql":
        yield True
        return
    with store._lock:
        got = bool(store._query("SELECT pg_try_advisory_lock(?)", (key,))[0][0])
    try:
        yield got
    finally:
        if got:
            with store._lock:
                store._query("SELECT pg_advisory_unlock(?)", (key,))


def prune_lease(store: Store) -> AbstractContextManager[bool]:
    """:func:`advisory_lease` of the prune: one collector at a time on a shared store."""
    return advisory_lease(store, PRUNE_LOCK)


class DailyJob:
    """A collector's job once a day (the first ``first_after_s`` after start), run only under
    its lease (:func:`advisory_lease` of ``lock``); a failure is logged, never raised."""

    def __init__(self, name: str, lock: int, run_once: Callable[[], str], store: Store,
                 every_s: float, first_after_s: float) -> None:
        self.name = name
        self.lock = lock
        self.run_once = run_once  # runs the job; what it did, for the log
        self.store = store
        self.every_s = every_s
        self.first_after_s = first_after_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the daily thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop it (a running batch finishes first)."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        wait = self.first_after_s
        while not self._stop.wait(wait):
            wait = self.every_s
            try:
                with advisory_lease(self.store, self.lock) as mine:
                    if not mine:
                        log.info("%s: another collector holds the lease, skipped today", self.name)
                        continue
                    done = self.run_once()
                log.info("%s: %s", self.name, done)
            except Exception:  # the job must never take the collector down
                log.exception("%s: failed, the next run is tomorrow", self.name)


class DailyPrune(DailyJob):
    """The collector's prune, once a day (the first an hour after start), under the lease."""

    def __init__(self, run_once: Callable[[], list[VehiclePrune]], store: Store,
                 every_s: float = 86_400.0, first_after_s: float = 3_600.0) -> None:
        def once() -> str:
            done = run_once()
            return (f"{sum(p.deleted for p in done)} records past the keeping period deleted "
                    f"({sum(1 for p in done if p.deleted)} vehicles)")

        super().__init__("prune", PRUNE_LOCK, once, store, every_s, first_after_s)


def now_day_ms() -> int:
    """The collector's clock in ms (only to date today; a record's age is by its device time)."""
    return now_ms()
