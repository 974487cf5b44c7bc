"""The live rules' tables (migration ``011_live_rules``): checkpoints, partitions, findings by
partition — SQL both backends run, through the store's own connection and lock."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from collector.live_leases import RENEW_ONE, LeaseLostError
from collector.store import Store

#: ``findings_state`` names: the newest record row id already judged (``live_last_id:PART``,
#: one per partition); the fingerprint of what the checkpoints were made with
#: (collector/live_state.py).
LAST_ID = "live_last_id"
FINGERPRINT = "live_fingerprint"
#: The row id judged of a partition that never judged anything (its compacted days not judged
#: either); 0 is a partition that judged its records when none was stored as a row (all in
#: compacted days).
NEVER = -1


def last_id_name(part: str) -> str:
    """The ``findings_state`` name of a partition's newest row id judged."""
    return f"{LAST_ID}:{part}"

UPSERT_FINDING = (
    "INSERT INTO findings (id, rule, vehicle, driver, start_ms, end_ms, finding, part, kept_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET rule = excluded.rule, "
    "vehicle = excluded.vehicle, driver = excluded.driver, start_ms = excluded.start_ms, "
    "end_ms = excluded.end_ms, finding = excluded.finding, part = excluded.part, "
    "kept_ms = excluded.kept_ms"
)
UPSERT_STATE = (
    "INSERT INTO findings_state (name, value) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)


@dataclass(frozen=True)
class Arrived:
    """Records stored after a row id, by vehicle: their earliest ``ts`` and the newest row id."""

    earliest_ms: dict[str, int]
    newest_id: int


def state(store: Store, name: str) -> int | None:
    """A ``findings_state`` value (None: never set)."""
    rows = store._read("SELECT value FROM findings_state WHERE name = ?", (name,))
    return None if not rows else int(rows[0][0])


def horizon(store: Store) -> int | None:
    """The newest row id below which no record can still appear (None: no limit).

    SQLite has one writer: row ids are given in commit order. PostgreSQL gives ids from a
    sequence when a row is inserted, not when it commits: with several collectors ingesting, id
    100 may commit after id 101 was read, and a reader that went on from 101 would never judge
    it. ``LOCK TABLE records IN SHARE MODE`` waits for every transaction that inserted into
    ``records`` (an INSERT holds ROW EXCLUSIVE until its commit) and holds new ones back while
    the newest id is read; every id given later is above it. The ingest waits for that one read.
    """
    if store.dialect != "postgresql":
        return None
    with store._lock, store._transaction() as tx:
        store._executemany(tx, "LOCK TABLE records IN SHARE MODE", [()])
        return int(store._query("SELECT coalesce(max(id), 0) FROM records")[0][0])


def arrived(store: Store, after_id: int, until_id: int | None = None,
            after: Callable[[str], int] | None = None, page: int = 10_000) -> Arrived:
    """What arrived after row ``after_id`` (up to ``until_id``; for a vehicle whose partition
    judged further, after ``after[vehicle]``): a range of the primary key read page by page and
    summed up here (a GROUP BY vehicle would let SQLite walk a vehicle index, i.e. the store).
    :data:`NEVER`: from the beginning, the compacted days too."""
    earliest: dict[str, int] = {}
    if after_id == NEVER:   # from the beginning: the compacted days too (collector/store_disc.py)
        for vehicle, first in store._read("SELECT vehicle, min(first_ms) FROM disc_days "
                                          "GROUP BY vehicle"):
            if after is None or after(str(vehicle)) == NEVER:   # its partition never judged
                earliest[str(vehicle)] = int(first)
    newest = max(after_id, 0)
    limit = (1 << 62) if until_id is None else until_id
    since: dict[str, int] = {}
    while True:
        rows = store._read("SELECT id, vehicle, ts_ms FROM records WHERE id > ? AND id <= ? "
                           "ORDER BY id LIMIT ?", (newest, limit, page))
        for row_id, vehicle, ts_ms in rows:
            key, ms = str(vehicle), int(ts_ms)
            newest = int(row_id)
            if after is not None:
                if key not in since:
                    since[key] = after(key)
                if newest <= since[key]:
                    continue
            if ms < earliest.get(key, ms + 1):
                earliest[key] = ms
        if len(rows) < page:
            return Arrived(earliest, max(newest, after_id if until_id is None else until_id))


def parts(store: Store) -> dict[str, str]:
    """Every vehicle the live rules have seen, and its partition."""
    return {str(v): str(p) for v, p in store._read("SELECT vehicle, part FROM live_parts")}


def checkpoint_before(store: Store, part: str, ms: int | None) -> tuple[int, bytes] | None:
    """The partition's latest checkpoint whose boundary is at or before ``ms`` (None: the latest
    of all, the tail included) as (boundary, state), or None."""
    sql = "SELECT boundary_ms, state FROM live_checkpoints WHERE part = ?"
    params: tuple[Any, ...] = (part,)
    if ms is not None:
        sql += " AND boundary_ms <= ?"
        params = (part, ms)
    rows = store._read(sql + " ORDER BY boundary_ms DESC, tail DESC LIMIT 1", params)
    return None if not rows else (int(rows[0][0]), bytes(rows[0][1]))


def drop_checkpoint(store: Store, part: str, boundary_ms: int) -> None:
    """Forget an unreadable checkpoint."""
    store.apply([("DELETE FROM live_checkpoints WHERE part = ? AND boundary_ms = ?",
                  [(part, boundary_ms)])])


def part_findings(store: Store, part: str,
                  since_ms: int | None) -> dict[str, tuple[str, int | None]]:
    """id -> (JSON, kept at) of the partition's findings kept at or after ``since`` or open
    (``since`` None: all of them)."""
    sql = "SELECT id, finding, kept_ms FROM findings WHERE part = ?"
    params: tuple[Any, ...] = (part,)
    if since_ms is not None:
        sql += " AND (kept_ms IS NULL OR kept_ms >= ?)"
        params = (part, since_ms)
    return {str(i): (str(text), None if kept is None else int(kept))
            for i, text, kept in store._read(sql, params)}


def write(store: Store, *, part: str, new_parts: Iterable[tuple[str, str]],
          since_ms: int | None, steps: Sequence[tuple[int, bytes]], tail: tuple[int, bytes] | None,
          thin_before_ms: int | None, thin_every_ms: int, keep_tail_ms: int, gone: Sequence[str],
          upserts: Sequence[tuple[Any, ...]], as_of_ms: int, made_ms: int,
          last_id: int | None, lease: tuple[str, int] | None = None) -> None:
    """One partition's evaluation, replayed from ``since`` (None: the beginning), in ONE
    transaction: its vehicles, checkpoints (those after ``since`` and the tail replaced, the
    previous tail kept as a step checkpoint when no step is less than ``keep_tail_ms`` before
    it; step checkpoints before ``thin_before_ms`` thinned to the first of each
    ``thin_every_ms``), findings gone
    and upserted, the ``as_of`` and the partition's row id judged. ``lease``: (holder, ttl ms)
    on a shared store — the same transaction renews the partition's lease, and is rolled back
    with LeaseLostError when the lease is not the holder's (collector/live_leases.py)."""
    statements: list[tuple[str, Sequence[tuple[Any, ...]]]] = [
        ("INSERT INTO live_parts (vehicle, part) VALUES (?, ?) ON CONFLICT (vehicle) "
         "DO UPDATE SET part = excluded.part", list(new_parts)),
        ("DELETE FROM live_checkpoints WHERE part = ? AND boundary_ms > ?",
         [(part, -(1 << 62) if since_ms is None else since_ms)]),
        ("INSERT INTO live_checkpoints (part, boundary_ms, tail, state, made_ms) "
         "VALUES (?, ?, 0, ?, ?) ON CONFLICT (part, tail, boundary_ms) DO UPDATE SET "
         "state = excluded.state, made_ms = excluded.made_ms",
         [(part, b, blob, made_ms) for b, blob in steps]),
    ]
    if tail is not None:   # the previous tail stays, as a step checkpoint (thinned later),
        # unless a step is close before it (an UPDATE: its state is not copied)
        statements.append((
            "UPDATE live_checkpoints SET tail = 0 WHERE part = ? AND tail = 1 AND NOT EXISTS "
            "(SELECT 1 FROM live_checkpoints o WHERE o.part = live_checkpoints.part "
            "AND o.tail = 0 AND o.boundary_ms > live_checkpoints.boundary_ms - ?)",
            [(part, keep_tail_ms)]))
        statements.append(("DELETE FROM live_checkpoints WHERE part = ? AND tail = 1", [(part,)]))
        statements.append(("INSERT INTO live_checkpoints (part, boundary_ms, tail, state, made_ms) "
                           "VALUES (?, ?, 1, ?, ?)", [(part, tail[0], tail[1], made_ms)]))
    if thin_before_ms is not None:   # those replayed now, or recent: older ones were thinned
        # by the evaluations before
        statements.append((
            "DELETE FROM live_checkpoints WHERE part = ? AND tail = 0 AND boundary_ms < ? "
            "AND boundary_ms >= ? AND EXISTS (SELECT 1 FROM live_checkpoints o WHERE "
            "o.part = live_checkpoints.part AND o.tail = 0 "
            "AND o.boundary_ms < live_checkpoints.boundary_ms "
            "AND o.boundary_ms >= live_checkpoints.boundary_ms / ? * ?)",
            [(part, thin_before_ms,
              -(1 << 62) if since_ms is None else min(thin_before_ms - 4 * thin_every_ms,
                                                       since_ms),
              thin_every_ms, thin_every_ms)]))
    statements += [
        ("DELETE FROM findings WHERE id = ?", [(i,) for i in gone]),
        (UPSERT_FINDING, list({row[0]: row for row in upserts}.values())),   # one per id
        (UPSERT_STATE, [("as_of_ms", as_of_ms)]),
    ]
    if last_id is not None:
        statements.append((UPSERT_STATE, [(last_id_name(part), last_id)]))
    with store._lock, store._transaction() as tx:
        if lease is not None and store._executemany(
                tx, RENEW_ONE, [(lease[1], part, lease[0])]) != 1:
            raise LeaseLostError(part)
        for sql, rows in statements:
            if rows:
                store._executemany(tx, sql, rows)


def set_last_id(store: Store, part: str, last_id: int) -> None:
    """A partition with no records judged up to ``last_id`` (nothing of it arrived)."""
    store.apply([(UPSERT_STATE, [(last_id_name(part), last_id)])])


def replace_store_only(store: Store, part: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Replace the findings of the store-only rules (their own partition) in one transaction
    (one row per id, the last one given: one statement upserts them on PostgreSQL)."""
    store.apply([("DELETE FROM findings WHERE part = ?", [(part,)]),
                 (UPSERT_FINDING, list({row[0]: row for row in rows}.values()))])


def reset(store: Store, fingerprint: int) -> None:
    """Start the live rules over (new registry, profiles or rules): no checkpoints, no findings,
    nothing judged yet."""
    store.apply([
        ("DELETE FROM live_checkpoints", [()]),
        ("DELETE FROM live_parts", [()]),
        ("DELETE FROM findings", [()]),
        ("DELETE FROM findings_state WHERE name LIKE ?", [(LAST_ID + "%",)]),
        (UPSERT_STATE, [(FINGERPRINT, fingerprint)]),
    ])
