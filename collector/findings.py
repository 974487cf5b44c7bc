"""The rules live in the collector: findings of the stored records, kept in a ``findings`` table.

The live findings are what ``frota check --as-of NOW`` gives on the stored records with ``ts`` <=
NOW (the store-only rules ``retention.minimum`` and ``equipment.integrity`` added), but each
evaluation costs what arrived plus a bounded replay, never the store: collector/live_rules.py
keeps the engine's state per partition with checkpoints in the store and upserts findings by
their stable id (docs/collector.md, "Live findings"). A background thread polls the store's
newest row id (cheap, every ``poll_s``) and evaluates once the store has been quiet for
``quiet_s`` (a backlog burst is one evaluation, not one per message), at the latest
``max_delay_s`` after the first new record — a record stored while an evaluation ran counts from
that evaluation's start — but never sooner after an evaluation than it took (up to
``max_delay_s``), so the evaluator has at most half of the interpreter and the ingest the rest:
under a steady stream of batches, once a second while evaluations take under half a second,
back to back with equal rests when they take longer (each evaluation costs what arrived, so a
record is judged within a couple of seconds of being stored), and at least every
``refresh_s`` so that open deadlines and interruptions grow with the clock. The store-only rules
pass over every vehicle, so they run in a thread of their own every ``refresh_s`` (and when the
store's integrity events change), not after every burst and never holding the live rules back. After each evaluation ``on_evaluated``
is given the (vehicle, agent, seq) of the records it judged for the first time (the collector
publishes them, protocols/evaluated.py). :func:`evaluate_store` is the whole-store evaluation (the reference the live findings are
tested against). See docs/rules.md, "Findings in the collector".
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from collector import registry as fleet
from collector import store_live
from collector.live_leases import TTL_S, Leases
from collector.live_rules import LiveRules, finding_row
from collector.partitions import PartitionedEngine, partition_names, partition_of
from collector.retention_days import Summaries
from collector.retention_findings import retention_findings
from collector.rules.engine import Engine
from collector.rules.finding import Finding, sort_key
from collector.rules.profile import Profile, load_profiles
from collector.store import Store, StoreError
from collector.verifier import integrity_findings
from protocols.records import now_ms, ts_to_ms

log = logging.getLogger(__name__)

#: The partition of the store-only rules' findings (replaced whole at each evaluation).
STORE_ONLY = "~store"

def stored_records(store: Store, as_of_ms: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every stored record with ts <= ``as_of`` as (ts ms, record), vehicle by vehicle."""
    until = None if as_of_ms is None else as_of_ms + 1
    for vehicle in store.vehicle_ids():
        for text in store.records(vehicle, None, until):
            rec = orjson.loads(text)
            yield ts_to_ms(rec["ts"]), rec


def evaluate_store(store: Store, registry: fleet.Registry, as_of_ms: int,
                   profiles: dict[str, Profile] | None = None,
                   default_profile: str = "SP") -> list[Finding]:
    """The findings of everything stored, judged at ``as_of`` — what ``frota check --as-of`` gives
    on the same records (one engine per operator, collector/partitions.py)."""
    engine = PartitionedEngine(registry, profiles if profiles is not None else load_profiles(),
                               default_profile)
    _feed(engine, store, registry, as_of_ms)
    return engine.findings(as_of_ms)


def engine_of_store(store: Store, registry: fleet.Registry, as_of_ms: int,
                    profiles: dict[str, Profile] | None = None,
                    default_profile: str = "SP") -> Engine:
    """One engine (the whole registry, operators not apart) fed with every stored record up to
    ``as_of``: what ``frota collector stats`` counts trips with."""
    engine = Engine(registry, profiles if profiles is not None else load_profiles(),
                    default_profile, retain=False)
    _feed(engine, store, registry, as_of_ms)
    return engine


def _feed(engine: Engine | PartitionedEngine, store: Store, registry: fleet.Registry,
          as_of_ms: int) -> None:
    items = sorted(
        ((ms, rec["vehicle"], rec.get("seq") or 0, rec.get("agent") or "", rec)
         for ms, rec in stored_records(store, as_of_ms)),
        key=lambda item: item[:4],
    )
    for ms, _, _, _, rec in items:
        if rec["kind"] == "trip" and rec["line"] not in registry.lines:
            continue                        # frota check refuses it; live, it is skipped
        engine.add_one(ms, rec)


def save(store: Store, findings: list[Finding], as_of_ms: int) -> None:
    """Replace the stored findings (one transaction) and remember their ``as_of``."""
    rows = [(f["id"], f["rule"], f["vehicle"], f["driver"], ts_to_ms(f["start"]),
             None if f["end"] is None else ts_to_ms(f["end"]), orjson.dumps(f).decode())
            for f in findings]
    store.replace_findings(rows, as_of_ms)


def load(store: Store, vehicle: str | None = None,
         since_ms: int | None = None) -> tuple[list[Finding], int | None]:
    """The stored findings (of a vehicle; ending at or after ``since``, or still open) in
    docs/records.md's order, and the ``as_of`` they were computed for (None: never evaluated)."""
    texts, as_of = store.findings(vehicle, since_ms)
    return sorted((orjson.loads(text) for text in texts), key=sort_key), as_of


class LiveFindings:
    """The background evaluator of a running collector (see the module docstring)."""

    def __init__(self, store: Store, registry_path: Path, *, poll_s: float = 0.1,
                 quiet_s: float = 1.0, max_delay_s: float = 1.0, refresh_s: float = 60.0,
                 default_profile: str = "SP",
                 on_evaluated: Callable[[list[tuple[Any, Any, Any]], int], object] | None = None,
                 lease_s: float = TTL_S, holder: str | None = None) -> None:
        self.store = store
        self.registry_path = registry_path
        self.poll_s = poll_s
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self.refresh_s = refresh_s
        self.default_profile = default_profile
        #: Told the (vehicle, agent, seq) rows each evaluation judged first, and its ``as_of``.
        self.on_evaluated = on_evaluated
        self.profiles = load_profiles()
        self._registry = fleet.load(registry_path)
        self._mtime = os.stat(registry_path).st_mtime_ns
        self.leases = Leases(store, holder or f"collector@{socket.gethostname()}:{os.getpid()}",
                             lease_s)
        #: Seconds between two evaluations at most while holding leases (renewed well before
        #: they run out).
        self.renew_s = lease_s / 3 if self.leases.shared else refresh_s
        self._live = LiveRules(store, self._registry, registry_path.read_bytes(), self.profiles,
                               default_profile, leases=self.leases)
        #: retention.minimum's per vehicle-day summaries, kept between evaluations
        self.retention_days = Summaries(store)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="findings", daemon=True)
        #: The store-only rules run apart, so that their pass over the fleet never holds the
        #: live evaluation (and the latency to stored-and-evaluated) back.
        self._store_thread = threading.Thread(target=self._run_store_only,
                                              name="findings-store", daemon=True)
        self._store_only_lock = threading.Lock()
        self.evaluations = 0

    def start(self) -> None:
        """Start the evaluator threads (live rules; store-only rules)."""
        self._thread.start()
        self._store_thread.start()

    def stop(self) -> None:
        """Stop it (waits for a running evaluation to finish) and give its leases back."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._store_thread.join(timeout=30)
        try:
            self.leases.release()
        except StoreError as err:     # they run out by themselves
            log.warning("findings: leases not given back: %s", err)

    def _reg(self) -> fleet.Registry:
        try:
            mtime = os.stat(self.registry_path).st_mtime_ns
            if mtime != self._mtime:
                self._registry = fleet.load(self.registry_path)
                self._mtime = mtime
                self._live = LiveRules(self.store, self._registry,
                                       self.registry_path.read_bytes(), self.profiles,
                                       self.default_profile, leases=self.leases)
        except (OSError, fleet.RegistryError) as err:
            log.error("findings: registry not reloaded, keeping the previous one: %s", err)
        return self._registry

    def evaluate_now(self, *, store_only: bool = True) -> int:
        """Bring the findings up to the store at the collector's clock (and the store-only
        rules' findings too, unless ``store_only`` is False); return the ``as_of``."""
        as_of = now_ms()
        began, cpu = time.perf_counter(), time.thread_time()
        reg = self._reg()
        held = self.leases.claim([*partition_names(reg), STORE_ONLY])
        judged = self._judged(held)
        claimed = time.perf_counter()
        done = self._live.evaluate(as_of, as_of, held)
        evaluated = time.perf_counter()
        if self.on_evaluated is not None:
            self._tell(judged, as_of, done.arrived_rows)
        told = time.perf_counter()
        found = self._store_only(as_of) if store_only and STORE_ONLY in held else None
        self.evaluations += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("findings: %d replayed (from %s ms before as_of), %d upserted, %d deleted, "
                      "%s store-only at %d in %.0f ms (CPU %.0f ms; claim %.0f, %s, tell %.0f)",
                      sum(done.replayed.values()),
                      max((as_of - b for b in done.boundaries.values() if b is not None),
                          default=None), done.upserted, done.deleted,
                      "no" if found is None else len(found), as_of,
                      1000 * (time.perf_counter() - began),
                      1000 * (time.thread_time() - cpu), 1000 * (claimed - began),
                      ", ".join(f"{k} {w:.0f}/{c:.0f}" for k, (w, c) in done.timings.items()),
                      1000 * (told - evaluated))
        return as_of

    def _store_only(self, as_of: int) -> list[Finding]:
        """The store's own findings, replaced whole in their own partition (under its own
        lease): equipment.integrity (collector/verifier.py) and retention.minimum (records
        missing inside the minimum period, collector/retention_findings.py)."""
        with self._store_only_lock:  # the live thread's first evaluation, then their own
            found = integrity_findings(self.store, self.default_profile)
            found += retention_findings(self.store, self._registry, self.profiles, as_of,
                                        self.default_profile, self.retention_days)
            store_live.replace_store_only(self.store, STORE_ONLY,
                                          [finding_row(f, STORE_ONLY, None) for f in found])
        return found

    def _judged(self, held: list[str]) -> dict[str, int]:
        """The row id each held partition has judged up to."""
        return {p: store_live.state(self.store, store_live.last_id_name(p)) or 0
                for p in held if p != STORE_ONLY}

    def _tell(self, judged_before: dict[str, int], as_of: int,
              read: dict[str, list[tuple[str, str, int]]] | None = None) -> None:
        """Give ``on_evaluated`` the records of this collector's partitions stored after the row
        each had judged and judged now; ``read``: those the evaluation read already, per
        partition (collector/live_rules.py, ``Evaluation.arrived_rows``), not read again."""
        assert self.on_evaluated is not None
        judged = self._judged(list(judged_before))
        moved = {p: (judged_before[p], n) for p, n in judged.items() if n > judged_before[p]}
        if not moved:
            return
        rows: list[tuple[Any, Any, Any]] = []
        for p, got in (read or {}).items():
            if p in moved:      # the range (before, now] of row ids, read by the evaluation
                rows += got
                del moved[p]
        if moved:
            rows += self._stored_rows(moved)
        try:
            self.on_evaluated(rows, as_of)
        except Exception:  # telling is best effort: the findings are stored already
            log.exception("findings: the evaluation of %d record(s) was not announced", len(rows))

    def _stored_rows(self, moved: dict[str, tuple[int, int]]) -> list[tuple[Any, Any, Any]]:
        """The (vehicle, agent, seq) of the records of each partition with a row id in its
        range (after, up to]."""
        low = min(a for a, _ in moved.values())
        high = max(b for _, b in moved.values())
        reg = self._registry
        part: dict[str, str] = {}
        rows = []
        for row_id, vehicle, agent, seq in self.store._read(
                "SELECT id, vehicle, agent, seq FROM records WHERE id > ? AND id <= ?",
                (low, high)):
            name = part.get(vehicle) or part.setdefault(vehicle, partition_of(vehicle, reg))
            bounds = moved.get(name)
            if bounds is not None and bounds[0] < row_id <= bounds[1]:
                rows.append((vehicle, agent, seq))
        return rows

    def _integrity_count(self) -> int:
        rows = self.store._read("SELECT count(*) FROM integrity")
        return int(rows[0][0]) if rows else 0

    def _run(self) -> None:
        seen = -1
        changed_at: float | None = None     # first change not evaluated yet
        quiet_since = 0.0                   # last change seen
        evaluated = -self.refresh_s         # the last evaluation (leases renewed)
        rest_until = 0.0                    # no evaluation before (the ingest's share)
        first = True                        # with the store-only rules (then their thread's)
        while not self._stop.wait(self.poll_s):
            try:
                now = time.monotonic()
                newest = self.store.newest_record_id()
                if newest != seen:
                    seen = newest
                    quiet_since = now
                    if changed_at is None:
                        changed_at = now
                due = changed_at is not None and (now - quiet_since >= self.quiet_s
                                                  or now - changed_at >= self.max_delay_s)
                if (due and now >= rest_until) or now - evaluated >= min(self.refresh_s,
                                                                         self.renew_s):
                    changed_at = None
                    evaluated = now
                    self.evaluate_now(store_only=first)
                    first = False
                    end = time.monotonic()
                    # at most half of the time evaluating: as long a rest as the evaluation
                    # took (up to max_delay_s), so the ingest keeps its share of the interpreter
                    rest_until = end + min(end - now, self.max_delay_s)
                    newest = self.store.newest_record_id()
                    if newest != seen:  # stored while it ran: waiting since it started
                        seen, quiet_since, changed_at = newest, end, now
            except Exception:  # the evaluator must never take the collector down
                log.exception("findings: evaluation failed")

    def _run_store_only(self) -> None:
        """Every ``refresh_s``, and when the integrity events change, the store-only rules (the
        live thread's first evaluation ran them first; they run under their lease)."""
        last = time.monotonic()
        try:
            integrity = self._integrity_count()
        except Exception:
            log.exception("findings: integrity events not counted")
            integrity = -1
        while not self._stop.wait(max(4 * self.poll_s, 1.0)):   # a count(*) under the lock
            try:
                now = time.monotonic()
                events = self._integrity_count()
                if (now - last >= self.refresh_s or events != integrity) \
                        and STORE_ONLY in self.leases.held:
                    last, integrity = now, events
                    self._store_only(now_ms())
            except Exception:  # the evaluator must never take the collector down
                log.exception("findings: store-only evaluation failed")
