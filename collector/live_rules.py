"""Incremental live rules: each evaluation costs what arrived plus a bounded replay, never the store.

See docs/collector.md, "Live findings". In short:

- **Partitions.** The engine's state is kept per partition: the vehicles of one operator
  (registry ``vehicles[].operator``), judged together on the partition's view of the registry
  (collector/partitions.py: drivers followed across the operator's vehicles, its lines'
  timetables, its fleet's age); vehicles without an operator share the partition ``fleet``.
  ``frota check`` judges the same way (one engine per partition), so the live findings equal its
  own. The evaluator replays one partition at a time.
- **Checkpoints.** While it replays, the evaluator saves the engine state (collector/live_state.py)
  at every ``step_ms`` of device time (5 minutes), and a *tail* checkpoint at the settled
  boundary (:class:`Settling`: ``as_of`` minus the lateness of what arrives), the previous tail
  staying as a step every 30 s. Steps older than ``dense_ms`` (2 hours before the newest record)
  are thinned to the first of each hour. Between evaluations each partition's settled engine
  (at the tail's boundary), its records since and its findings are kept in memory
  (:class:`Kept`); the engine is fed in place, pickled only for a checkpoint written (the tail
  every 10 s, a step) or to judge the records after the settled boundary on a copy.
- **An evaluation.** What arrived is found by row id (``records.id > last``: a range of the
  primary key). For each partition, the evaluator restores the latest checkpoint at or before the
  earliest record that arrived (none arrived: the tail, so open findings grow with the clock),
  reads that partition's records from its boundary to ``as_of`` (the (vehicle, ts) index), feeds
  them in ``frota check``'s order, and writes in one transaction: the new checkpoints, the
  findings kept at or after the boundary or open (upserted by their stable id; those no longer
  found deleted), ``as_of``. A backlog days old replays from the checkpoint before it, not from
  the beginning of time.
- **Restart.** The row id judged, the checkpoints and a fingerprint of the registry, profiles and
  rules are in the store: a restarted collector goes on from them. A new registry (or profiles,
  or rules) changes the fingerprint: every checkpoint is dropped and the store replayed once.
"""

from __future__ import annotations

import logging
import operator
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Final

import orjson

from collector import registry as fleet
from collector import store_live
from collector.live_leases import LeaseLostError, Leases
from collector.live_state import (
    CheckpointError,
    LiveEngine,
    fingerprint,
    fork,
    restore,
    snapshot,
)
from collector.partitions import partition_names, partition_of, partition_registry
from collector.rules.finding import Finding
from collector.rules.profile import Profile
from collector.store import Store
from collector.store_partition import Item, _key, partition_records
from protocols.records import ts_to_ms

log = logging.getLogger(__name__)

STEP_MS = 5 * 60_000
DENSE_MS = 2 * 3_600_000
THIN_MS = 3_600_000
#: A previous tail is kept as a step checkpoint only this long (device time) after the step
#: before it: under a steady stream, one every 30 s, not one per evaluation.
KEEP_TAIL_MS = 30_000
#: Bounds of the settling delay (how far behind ``as_of`` the tail is written, see
#: :class:`Settling`).
SETTLE_MAX_MS = 60_000
#: Device time of previous tails kept in memory (:class:`Kept`).
KEEP_BACK_MS = 15_000
#: Seconds between two writes of a partition's tail checkpoint to the store while its state is
#: kept in memory (:class:`Kept`): a collector that dies replays at most this much more.
TAIL_WRITE_S = 10.0
#: The head (the records after the settled boundary) is judged on a copy of its own vehicles'
#: state alone (collector/live_state.py, ``fork``) when it holds speed and position records only,
#: of at most one vehicle in FORK_SHARE of the partition's; else on a copy of the whole state
#: (which is also kept, for a record later than the settling delay).
FORK_SHARE = 2
FORK_KINDS = frozenset({"speed", "position"})
#: Findings' start times kept parsed (:func:`finding_row`) before the table is emptied.
STARTS_KEPT = 100_000
#: Evaluations whose lateness the settling delay remembers.
SETTLE_MEMORY = 20
#: The share of a partition's vehicles whose lateness the tail waits for; a vehicle later than
#: that (a backlog) replays the partition once, from the checkpoint before its records.
SETTLE_QUANTILE = 0.95


def finding_row(f: Finding, part: str, kept_ms: int | None, text: str | None = None,
                times: dict[str, int] | None = None) -> tuple[Any, ...]:
    """A finding as the columns of ``findings`` (store_live.UPSERT_FINDING's order);
    ``text``: its JSON when already made; ``times``: ``ts`` -> ms already parsed (filled in)."""
    start, end = f["start"], f["end"]
    if times is None:
        start_ms = ts_to_ms(start)
    else:
        start_ms = times.get(start) or times.setdefault(start, ts_to_ms(start))
    return (f["id"], f["rule"], f["vehicle"], f["driver"], start_ms,
            None if end is None else ts_to_ms(end),
            orjson.dumps(f).decode() if text is None else text, part, kept_ms)


@dataclass
class Evaluation:
    """What one evaluation did (for logs, tests and the benchmark)."""

    as_of_ms: int
    arrived_vehicles: int = 0
    replayed: dict[str, int] = field(default_factory=dict)     # partition -> records fed
    boundaries: dict[str, int | None] = field(default_factory=dict)   # partition -> start
    upserted: int = 0
    deleted: int = 0
    #: partition -> the (vehicle, agent, seq) of the records stored after the row id it had
    #: judged, up to the one it judged now, when read anyway (its state kept in memory): the
    #: evaluation notice's (collector/findings.py), not read again
    arrived_rows: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    #: phase -> (wall ms, this thread's CPU ms), summed over the partitions (for the log)
    timings: dict[str, list[float]] = field(default_factory=dict)

    def timed(self, phase: str, wall_s: float, cpu_s: float) -> None:
        """Add a phase's wall and CPU seconds (:attr:`timings`)."""
        got = self.timings.setdefault(phase, [0.0, 0.0])
        got[0] += wall_s * 1000
        got[1] += cpu_s * 1000


class Settling:
    """How far behind ``as_of`` a partition's tail checkpoint is written.

    Records do not arrive in device-time order: each bus sends a batch a second (or every
    ``batch_interval_ms``), so when an evaluation runs, the other buses' records of the last
    second or so are still on their way. A tail written just after the newest record would be
    behind records still to come at almost every evaluation, and the next evaluation would
    replay from the checkpoint before it; a replay deletes the checkpoints after its start, so
    the one after next would go back as far again — under load the replay grew with every
    evaluation (600 buses, 10 minutes: a minute of the fleet replayed each time). The tail is
    written at ``as_of`` minus the lateness of the records that arrived in the last evaluations
    (how long before the previous evaluation's ``as_of`` the earliest record of each vehicle
    was: what was still on its way then; the 95th percentile over the partition's vehicles, the
    largest of the last 20 evaluations), so that the next
    evaluation starts from it, replaying only that delay and what arrived. An evaluation to
    which nothing of the partition arrived writes it just after the newest record, as before."""

    def __init__(self) -> None:
        self._seen: dict[str, deque[int]] = {}
        self._as_of: dict[str, int] = {}

    def delay_ms(self, part: str, as_of_ms: int, earliest: Sequence[int]) -> int:
        """Record the lateness of this evaluation's arrivals (their earliest ``ts`` per vehicle,
        before the previous evaluation's ``as_of``: what was on its way then) and return the
        delay to write the tail at."""
        before = self._as_of.get(part)
        self._as_of[part] = as_of_ms
        late = sorted(max(before - ms, 0) for ms in earliest) if before is not None else []
        if not earliest:   # a quiet partition: nothing on the way, the tail after its newest
            return 0
        seen = self._seen.setdefault(part, deque(maxlen=SETTLE_MEMORY))
        if late:           # (the first evaluation has no previous one to measure from)
            seen.append(min(late[min(int(len(late) * SETTLE_QUANTILE), len(late) - 1)],
                            SETTLE_MAX_MS))
        return max(seen, default=0)


@dataclass
class Kept:
    """A partition's state kept in memory between two evaluations while this collector holds
    it. ``engine`` has processed every record of the partition with ``ts`` before ``boundary``
    and none after (the settled state, nothing queued): the next evaluation goes on feeding it
    in place — no state copied, no checkpoint nor records read again from the store, only the
    records stored since — when the store's row id judged is still ``last_id`` (no other
    collector evaluated the partition meanwhile) and nothing arrived from before the boundary.
    ``items`` are the partition's records from the oldest of ``saved`` (else from
    ``boundary``) on, in ``frota check``'s order (those of a device clock ahead of ``as_of``
    too); ``findings`` those kept at or after the boundary, or open, as stored."""

    engine: LiveEngine
    boundary: int
    items: list[Item]
    findings: dict[str, tuple[str, int | None]]
    last_id: int
    written: float          # when the tail was last written to the store (monotonic s)
    #: states saved (pickled) of the last KEEP_BACK_MS, (boundary, state) oldest first, all at
    #: or before ``boundary``: a record a little later than the settling delay replays from
    #: one of them, not from the store's
    saved: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass
class _Fed:
    """What feeding one evaluation's records did (:meth:`LiveRules._feed`)."""

    fed: int = 0
    last_ms: int | None = None      # the newest record fed to the settled engine
    head: list[Item] = field(default_factory=list)    # at or after the settled boundary
    steps: list[tuple[int, bytes]] = field(default_factory=list)


_MS: Final = operator.itemgetter(0)


class _Clock:
    """Wall and thread CPU time of an evaluation's phases, into :attr:`Evaluation.timings`."""

    def __init__(self, report: Evaluation) -> None:
        self.report = report
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def lap(self, phase: str) -> None:
        """Add the time since the last lap to ``phase``."""
        wall, cpu = time.perf_counter(), time.thread_time()
        self.report.timed(phase, wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu


class LiveRules:
    """The incremental evaluator of one store (one thread at a time)."""

    def __init__(self, store: Store, registry: fleet.Registry, registry_bytes: bytes,
                 profiles: dict[str, Profile], default_profile: str = "SP", *,
                 step_ms: int = STEP_MS, dense_ms: int = DENSE_MS,
                 leases: Leases | None = None) -> None:
        self.store = store
        self.leases = leases
        self.registry = registry
        self.profiles = profiles
        self.default = default_profile
        self.step_ms = step_ms
        self.dense_ms = dense_ms
        self.fingerprint = fingerprint(registry_bytes, profiles, default_profile)
        self.settling = Settling()
        #: partition -> its state kept in memory (:class:`Kept`)
        self.kept: dict[str, Kept] = {}
        #: findings' ``start`` -> ms: an open finding is written again at every evaluation
        self._starts: dict[str, int] = {}

    def evaluate(self, as_of_ms: int, made_ms: int,
                 held: Collection[str] | None = None) -> Evaluation:
        """Bring the findings up to what is stored, judged at ``as_of``; ``made_ms`` is the
        collector's clock (when the checkpoints were made, for the record). ``held``: the
        partitions this collector holds the lease of (None: every partition, one collector)."""
        store = self.store
        if store_live.state(store, store_live.FINGERPRINT) != self.fingerprint:
            log.info("findings: registry, profiles or rules changed: replaying the store once")
            store_live.reset(store, self.fingerprint)
        names = partition_names(self.registry)
        mine = [p for p in names if held is None or p in held]
        if self.leases is not None:
            # a lease taken anew (not renewed): another collector may have judged the
            # partition meanwhile — even with no record arriving, so with the row id judged
            # this state was kept at — and written findings at its own as_of: not from memory
            for part in self.leases.taken:
                self.kept.pop(part, None)
            self.leases.taken.clear()
        report = Evaluation(as_of_ms)
        if not mine:
            return report
        lasts = {p: store_live.NEVER if (n := store_live.state(store, store_live.last_id_name(p)))
                 is None else n for p in mine}
        known = store_live.parts(store)

        def judged(vehicle: str) -> int:   # the row id its partition judged (others': all)
            part = known.get(vehicle) or partition_of(vehicle, self.registry)
            return lasts.get(part, 1 << 62)

        clock = _Clock(report)
        until = store_live.horizon(store)
        clock.lap("horizon")
        news = store_live.arrived(store, min(lasts.values()), until, judged)
        clock.lap("arrived")
        report.arrived_vehicles = len(news.earliest_ms)
        members: dict[str, set[str]] = {}
        for vehicle, part in known.items():
            members.setdefault(part, set()).add(vehicle)
        new_parts: dict[str, list[tuple[str, str]]] = {}
        earliest: dict[str, int] = {}
        firsts: dict[str, list[int]] = {}
        for vehicle, ms in news.earliest_ms.items():
            part = known.get(vehicle) or partition_of(vehicle, self.registry)
            if vehicle not in known:
                new_parts.setdefault(part, []).append((vehicle, part))
                members.setdefault(part, set()).add(vehicle)
            earliest[part] = min(ms, earliest.get(part, ms))
            firsts.setdefault(part, []).append(ms)
        for part in mine:
            if part not in members:
                if lasts[part] != news.newest_id:   # nothing of it stored yet
                    store_live.set_last_id(store, part, news.newest_id)
                continue
            settle = self.settling.delay_ms(part, as_of_ms, firsts.get(part, ()))
            try:
                self._partition(part, sorted(members[part]), earliest.get(part),
                                new_parts.get(part, []), as_of_ms, made_ms, news.newest_id,
                                report, as_of_ms - settle, lasts[part])
            except LeaseLostError:
                log.info("findings: the lease of %s ran out: left to its new holder", part)
        for part in list(self.kept):
            if part not in mine:      # another collector's now: its store state moves on
                del self.kept[part]
        return report

    def _start(self, part: str, start: int | None) -> tuple[LiveEngine, int | None]:
        """The engine restored from the latest usable checkpoint at or before ``start``, and its
        boundary (None: no checkpoint, from the beginning)."""
        view = partition_registry(self.registry, part)
        while True:
            found = store_live.checkpoint_before(self.store, part, start)
            if found is None:
                return LiveEngine(view, self.profiles, self.default), None
            boundary, blob = found
            try:
                return restore(blob, view, self.profiles, self.default), boundary
            except CheckpointError as err:
                log.error("findings: checkpoint %s@%d dropped: %s", part, boundary, err)
                store_live.drop_checkpoint(self.store, part, boundary)

    def _resume(self, part: str, vehicles: list[str], start: int | None, judged_id: int,
                last_id: int | None, report: Evaluation | None = None
                ) -> tuple[LiveEngine, int | None, Kept | None, Iterable[Item],
                           list[tuple[int, bytes]]]:
        """The engine to feed, its boundary, the state kept in memory it came from (None: from
        the store), the partition's records from the boundary on (those with ``ts`` after
        ``as_of`` too; kept in memory with the records stored since, else read from the store
        as they are fed: a replay of days is never held in memory) and the saved states still
        valid. The kept engine itself when nothing arrived from before its boundary; else a
        saved state at or before the earliest record that arrived; else the store's
        checkpoint."""
        kept = self.kept.pop(part, None)
        if kept is not None and kept.last_id == judged_id and last_id is not None:
            items = kept.items
            wanted = set(vehicles)
            # the order's fields from their columns (record_row's, from the record itself):
            # only the JSON is parsed
            fresh = sorted(((int(ms), str(vehicle), int(seq), str(agent), orjson.loads(text))
                            for vehicle, agent, seq, ms, text in self.store._read(
                                "SELECT vehicle, agent, seq, ts_ms, record FROM records "
                                "WHERE id > ? AND id <= ?", (judged_id, last_id))
                            if vehicle in wanted), key=_key)
            if report is not None:
                report.arrived_rows[part] = [(vehicle, agent, seq)
                                             for _, vehicle, seq, agent, _ in fresh]
            if fresh:          # merged in order: only the part of the list after the first
                at = bisect_left(items, _key(fresh[0]), key=_key)
                tail = items[at:]
                del items[at:]
                tail += fresh
                tail.sort(key=_key)
                items += tail
            if start is None or start >= kept.boundary:
                engine = kept.engine        # findings kept before the boundary are stored
                engine.closed.clear()
                engine.kept_at.clear()
                return engine, kept.boundary, kept, items, kept.saved
            usable = [(b, blob) for b, blob in kept.saved if b <= start]
            if usable:
                since, blob = usable[-1]
                try:
                    engine = restore(blob, kept.engine.registry, self.profiles, self.default)
                except CheckpointError as err:   # not expected: made by this very process
                    log.error("findings: state %s@%d kept in memory unreadable: %s", part,
                              since, err)
                else:
                    return engine, since, kept, items, usable
        engine, boundary = self._start(part, start)
        return engine, boundary, None, partition_records(self.store, vehicles, boundary, 1 << 62), []

    def _feed(self, part: str, engine: LiveEngine, items: Iterable[Item], boundary: int | None,
              cut: int, as_of_ms: int, retained: list[Item] | None) -> _Fed:
        """Feed ``engine`` (at ``boundary``) the records before ``cut`` in order, saving a state
        at each ``step_ms`` boundary crossed, and flush it; collect those at or after ``cut``
        up to ``as_of`` (the head) and, into ``retained`` when given, every one at or after
        ``cut``."""
        out = _Fed()
        cell = None if boundary is None else boundary // self.step_ms
        step_ms = self.step_ms
        lines = self.registry.lines
        leases = self.leases
        renewed = time.monotonic()
        add = engine.add_one
        fed = 0
        for item in items:
            ms = item[0]
            if ms >= cut:
                if retained is not None:
                    retained.append(item)
                if ms <= as_of_ms:          # after as_of: a device clock ahead, fed when
                    out.head.append(item)   # as_of passes it
                continue
            if leases is not None and not fed % 4096 and \
                    time.monotonic() - renewed > leases.ttl_ms / 3000:
                leases.renew(part)          # a long replay keeps its lease
                renewed = time.monotonic()
            here = ms // step_ms
            if cell is not None and here > cell:
                engine.flush(final=True)    # everything before this step's boundary is done
                out.steps.append((here * step_ms, snapshot(engine)))
            cell = here
            out.last_ms = ms
            rec = item[4]
            if rec["kind"] == "trip" and rec["line"] not in lines:
                continue                    # frota check refuses it; live, it is skipped
            add(ms, rec)
            fed += 1
        engine.flush(final=True)
        out.fed = fed
        return out

    def _partition(self, part: str, vehicles: list[str], start: int | None,
                   new_parts: list[tuple[str, str]], as_of_ms: int, made_ms: int,
                   last_id: int | None, report: Evaluation, settled_ms: int,
                   judged_id: int) -> None:
        """Bring one partition from its state before ``start`` (its earliest arrived record;
        None: nothing arrived) up to ``as_of`` and write what it found. The records before the
        settled boundary (``settled_ms``, :class:`Settling`) are fed to the engine kept in
        memory, in place; those after it up to ``as_of`` (the head: other buses' records of
        that time may still be on their way) to a copy of it, which gives the findings and is
        dropped. ``judged_id``: the row id the store says the partition judged (that of a
        state kept in memory, or it is not used)."""
        clock = _Clock(report)
        engine, boundary, kept, items, saved = self._resume(part, vehicles, start, judged_id,
                                                            last_id, report)
        clock.lap("resume")
        report.boundaries[part] = boundary
        cut = min(settled_ms if boundary is None else max(settled_ms, boundary), as_of_ms + 1)
        retained: list[Item] | None = None
        if kept is None:
            retained = []
        else:
            assert isinstance(items, list)
            items = islice(items, bisect_left(items, -(1 << 62) if boundary is None
                                              else boundary, key=_MS), None)
        done = self._feed(part, engine, items, boundary, cut, as_of_ms, retained)
        clock.lap("feed")
        # the settled engine's new boundary: every record before it processed, none after
        settled: int | None
        if done.head:
            settled = cut
        elif done.last_ms is not None:
            settled = done.last_ms + 1
        else:
            settled = boundary
        blob: bytes | None = None
        judge = engine
        fed = done.fed
        if done.head:                       # judged on a copy: the settled engine stays
            own = {item[1] for item in done.head}
            if len(own) * FORK_SHARE <= len(engine.vehicles) and all(
                    item[4]["kind"] in FORK_KINDS for item in done.head):
                # a few vehicles' speed and position: a copy of their own state alone
                judge = fork(engine, own, self.profiles, self.default)
            else:
                blob = snapshot(engine)
                judge = restore(blob, engine.registry, self.profiles, self.default)
            judge.closed.update(engine.closed)
            judge.kept_at.update(engine.kept_at)
            lines = self.registry.lines
            for ms, _, _, _, rec in done.head:
                if rec["kind"] == "trip" and rec["line"] not in lines:
                    continue
                judge.add_one(ms, rec)
                fed += 1
        report.replayed[part] = fed
        clock.lap("head")
        found = judge.findings(as_of_ms)
        closed, kept_at = judge.closed, judge.kept_at
        before = kept.findings if kept is not None and boundary == kept.boundary else \
            store_live.part_findings(self.store, part, boundary)
        upserts: list[tuple[Any, ...]] = []
        now_found: dict[str, tuple[str, int | None]] = {}
        for f in found:
            fid = f["id"]
            text = orjson.dumps(f).decode()
            at = kept_at[fid] if closed.get(fid) is f else None
            now_found[fid] = (text, at)
            if before.get(fid) != (text, at):
                upserts.append(finding_row(f, part, at, text, self._starts))
        gone = [i for i in before if i not in now_found]
        newest = judge.latest_ms
        now = time.monotonic()
        # the tail goes to the store every TAIL_WRITE_S (and with new steps); in between it is
        # kept in memory only
        advanced = settled is not None and (boundary is None or settled > boundary)
        write_tail = advanced and (kept is None or bool(done.steps)
                                   or now - kept.written >= TAIL_WRITE_S)
        if write_tail and blob is None:
            blob = snapshot(engine)
        clock.lap("findings")
        store_live.write(
            self.store, part=part, new_parts=new_parts, since_ms=boundary, steps=done.steps,
            tail=(settled, blob) if write_tail and settled is not None and blob is not None
            else None,
            thin_before_ms=None if newest is None else newest - self.dense_ms,
            thin_every_ms=THIN_MS, keep_tail_ms=KEEP_TAIL_MS, gone=gone, upserts=upserts,
            as_of_ms=as_of_ms, made_ms=made_ms, last_id=last_id,
            lease=None if self.leases is None or not self.leases.shared
            else (self.leases.holder, self.leases.ttl_ms))
        clock.lap("write")
        if len(self._starts) > STARTS_KEPT:
            self._starts.clear()
        report.upserted += len(upserts)
        report.deleted += len(gone)
        if last_id is None or settled is None:
            return                          # nothing to go on from (no record yet)
        # the states saved of the last KEEP_BACK_MS, the one made now (the copy's or the
        # tail's) the newest
        if kept is None:
            saved, items = [], retained if retained is not None else []
        else:
            saved = [x for x in (*saved, *done.steps) if x[0] >= settled - KEEP_BACK_MS]
            items = kept.items
        if blob is not None and (not saved or saved[-1][0] < settled):
            saved.append((settled, blob))
        lo = min([settled, *(b for b, _ in saved)])
        if items and items[0][0] < lo:
            del items[:bisect_left(items, lo, key=_MS)]
        self.kept[part] = Kept(
            engine=engine, boundary=settled, items=items, saved=saved,
            findings={i: x for i, x in now_found.items() if x[1] is None or x[1] >= settled},
            last_id=last_id, written=now if write_tail or kept is None else kept.written)
