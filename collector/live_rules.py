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
  are thinned to the first of each hour. Between evaluations each partition's tail state, its
  records since and its findings are kept in memory (:class:`Kept`), the tail written to the
  store every 10 s.
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
import time
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from collector import registry as fleet
from collector import store_live
from collector.live_leases import LeaseLostError, Leases
from collector.live_state import CheckpointError, LiveEngine, fingerprint, restore, snapshot
from collector.partitions import partition_names, partition_of, partition_registry
from collector.rules.finding import Finding
from collector.rules.profile import Profile
from collector.store import Store
from collector.store_partition import Item, _item, _key, partition_records
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
#: Evaluations whose lateness the settling delay remembers.
SETTLE_MEMORY = 20
#: The share of a partition's vehicles whose lateness the tail waits for; a vehicle later than
#: that (a backlog) replays the partition once, from the checkpoint before its records.
SETTLE_QUANTILE = 0.95


def finding_row(f: Finding, part: str, kept_ms: int | None) -> tuple[Any, ...]:
    """A finding as the columns of ``findings`` (store_live.UPSERT_FINDING's order)."""
    return (f["id"], f["rule"], f["vehicle"], f["driver"], ts_to_ms(f["start"]),
            None if f["end"] is None else ts_to_ms(f["end"]), orjson.dumps(f).decode(), part,
            kept_ms)


@dataclass
class Evaluation:
    """What one evaluation did (for logs, tests and the benchmark)."""

    as_of_ms: int
    arrived_vehicles: int = 0
    replayed: dict[str, int] = field(default_factory=dict)     # partition -> records fed
    boundaries: dict[str, int | None] = field(default_factory=dict)   # partition -> start
    upserted: int = 0
    deleted: int = 0


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
    it: what the tail checkpoint holds (its boundary and state, the registry view it binds
    to), the partition's records read from the boundary on (``frota check``'s order; those of
    a device clock ahead of ``as_of`` too), its findings kept at or after the boundary or open,
    and the row id judged as written. The next evaluation starts from it — no checkpoint nor
    records read again from the store, only the records stored since — when the store's row
    id judged is still that one (no other collector evaluated the partition meanwhile) and
    nothing arrived from before the boundary."""

    boundary: int
    blob: bytes
    view: fleet.Registry
    items: list[Item]
    findings: dict[str, tuple[str, int | None]]
    last_id: int
    written: float          # when the tail was last written to the store (monotonic s)
    #: the previous tails of the last KEEP_BACK_MS, (boundary, state) oldest first: a record
    #: a little later than the settling delay replays from one of them, not from the store's
    #: (up to TAIL_WRITE_S + KEEP_TAIL_MS older); ``items`` go back to the oldest
    older: list[tuple[int, bytes]] = field(default_factory=list)


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
        report = Evaluation(as_of_ms)
        if not mine:
            return report
        lasts = {p: store_live.state(store, store_live.last_id_name(p)) or 0 for p in mine}
        known = store_live.parts(store)

        def judged(vehicle: str) -> int:   # the row id its partition judged (others': all)
            part = known.get(vehicle) or partition_of(vehicle, self.registry)
            return lasts.get(part, 1 << 62)

        news = store_live.arrived(store, min(lasts.values()), store_live.horizon(store), judged)
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
                last_id: int | None
                ) -> tuple[LiveEngine, int | None, Kept | None, Iterable[Item]]:
        """The engine to replay from, its boundary, the state kept in memory it came from (None:
        from the store) and the partition's records from the boundary on (those with ``ts``
        after ``as_of`` too; from the store, read as they are fed: a replay of days is never
        held in memory)."""
        kept = self.kept.pop(part, None)
        if kept is not None and kept.last_id == judged_id and last_id is not None:
            usable = [(b, blob) for b, blob in (*kept.older, (kept.boundary, kept.blob))
                      if start is None or b <= start]
            if usable:
                since, blob = usable[-1]
                wanted = set(vehicles)
                fresh = [_item(str(text)) for vehicle, text in self.store._read(
                    "SELECT vehicle, record FROM records WHERE id > ? AND id <= ?",
                    (judged_id, last_id)) if str(vehicle) in wanted]
                items = sorted([*kept.items, *fresh], key=_key) if fresh else kept.items
                kept.older = usable         # still valid: no record arrived before them
                return (restore(blob, kept.view, self.profiles, self.default), since, kept,
                        items)
        engine, boundary = self._start(part, start)
        return engine, boundary, None, partition_records(self.store, vehicles, boundary, 1 << 62)

    def _partition(self, part: str, vehicles: list[str], start: int | None,
                   new_parts: list[tuple[str, str]], as_of_ms: int, made_ms: int,
                   last_id: int | None, report: Evaluation, settled_ms: int,
                   judged_id: int) -> None:
        """Replay one partition from the checkpoint before ``start`` (its earliest arrived
        record; None: nothing arrived) up to ``as_of`` and write what it found; the tail
        checkpoint goes at ``settled_ms`` (:class:`Settling`) when records run past it, else
        just after the newest record. ``judged_id``: the row id the store says the partition
        judged (that of a state kept in memory, or it is not used)."""
        engine, boundary, kept, items = self._resume(part, vehicles, start, judged_id, last_id)
        report.boundaries[part] = boundary
        steps: list[tuple[int, bytes]] = []
        cell = None if boundary is None else boundary // self.step_ms
        fed = 0
        lines = self.registry.lines
        renewed = time.monotonic()
        tail = None
        cut = settled_ms if boundary is None or settled_ms > boundary else None
        # the states kept in memory from which a later evaluation may start: the one resumed
        # from and those after it of the last KEEP_BACK_MS
        back: list[tuple[int, bytes]] = []
        if kept is not None:
            back = [(b, x) for b, x in kept.older if b >= settled_ms - KEEP_BACK_MS]
        keep_from = min([settled_ms, *(b for b, _ in back)])
        held: list[Item] = []   # from keep_from on, or the newest millisecond's: kept in memory
        for item in items:
            ms, rec = item[0], item[4]
            if ms >= keep_from or (held and held[-1][0] == ms):
                held.append(item)
            else:
                held = [item]
            if ms > as_of_ms or (boundary is not None and ms < boundary):
                continue                    # a device clock ahead: fed when as_of passes it;
                # before the state resumed from: kept for an earlier one (Kept.older)
            if self.leases is not None and not fed % 4096 and \
                    time.monotonic() - renewed > self.leases.ttl_ms / 3000:
                self.leases.renew(part)     # a long replay keeps its lease
                renewed = time.monotonic()
            here = ms // self.step_ms
            if cell is not None and here > cell:
                engine.flush(final=True)    # everything before this step's boundary is done
                steps.append((here * self.step_ms, snapshot(engine)))
            cell = here
            if cut is not None and ms >= cut:
                engine.flush(final=True)    # everything before the settled boundary is done
                tail = (cut, snapshot(engine))
                cut = None
            if rec["kind"] == "trip" and rec["line"] not in lines:
                continue                    # frota check refuses it; live, it is skipped
            engine.add_one(ms, rec)
            fed += 1
        report.replayed[part] = fed
        engine.flush()                      # all but the newest millisecond's records
        done = engine._done_ms
        if tail is None and done is not None and done < settled_ms and (
                boundary is None or done + 1 > boundary):
            tail = (done + 1, snapshot(engine))   # every record settled (a quiet partition)
        found = engine.findings(as_of_ms)
        closed = engine.closed
        rows = {f["id"]: finding_row(f, part, engine.kept_at[f["id"]]
                                     if closed.get(f["id"]) is f else None) for f in found}
        before = kept.findings if kept is not None and boundary == kept.boundary else \
            store_live.part_findings(self.store, part, boundary)
        gone = [i for i in before if i not in rows]
        upserts = [row for i, row in rows.items() if before.get(i) != (row[6], row[8])]
        newest = engine.latest_ms
        now = time.monotonic()
        # the tail goes to the store every TAIL_WRITE_S (and with new steps); in between it is
        # kept in memory only
        write_tail = tail is not None and (kept is None or bool(steps)
                                           or now - kept.written >= TAIL_WRITE_S)
        store_live.write(
            self.store, part=part, new_parts=new_parts, since_ms=boundary, steps=steps,
            tail=tail if write_tail else None,
            thin_before_ms=None if newest is None else newest - self.dense_ms,
            thin_every_ms=THIN_MS, keep_tail_ms=KEEP_TAIL_MS, gone=gone, upserts=upserts,
            as_of_ms=as_of_ms,
            made_ms=made_ms, last_id=last_id,
            lease=None if self.leases is None or not self.leases.shared
            else (self.leases.holder, self.leases.ttl_ms))
        report.upserted += len(upserts)
        report.deleted += len(gone)
        if last_id is None:
            return
        if tail is not None:
            state, blob = tail
        elif back and back[-1][0] == boundary:
            state, blob = back.pop()        # where it started: nothing new settled
        else:
            return                          # nothing to start from (no record yet)
        back = [(b, x) for b, x in back if b < state]
        self.kept[part] = Kept(
            boundary=state, blob=blob, view=engine.registry, older=back,
            items=[item for item in held if item[0] >= min([state, *(b for b, _ in back)])],
            findings={i: (row[6], row[8]) for i, row in rows.items()
                      if row[8] is None or row[8] >= state},
            last_id=last_id, written=now if write_tail or kept is None else kept.written)
