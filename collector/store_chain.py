"""The chain in the collector's store: links, checkpoints, conflicts, integrity events.

Tables (named migration ``006_chain``, ``docs/trust.md``):

- ``records.hash``, ``records.prev`` (migration ``019_records_hash``) — a stored record's chain
  hash as received and its ``prev``, in its own row: what the verifier walks and ``frota
  verify`` checks the record against. NULL for a record stored before the chain, or turned back
  into a row from a compacted day (its hash is then a ``links`` row, as below).
- ``links`` — the *hash-only entries*: one row per (vehicle, agent, seq) the collector has seen
  from an agent without storing it as a row under that seq: the record's chain ``hash`` and its
  ``prev``, and its ``state`` — ``frame`` (its device frame was already stored under another
  seq, same content), ``rejected`` (the record was refused, its hash keeps the chain whole),
  ``conflict``, ``pruned`` (deleted by the prune, past the retention period), or ``stored``: a
  stored record whose row went to a compacted day without its link being folded into the day
  (collector/compaction.py), and every stored record of a store from before ``019``. The first
  row for an identity is never replaced.
- ``checkpoints`` — the agents' signed checkpoints, one per (vehicle, agent, seq, key) however
  often a batch is resent; ``state`` ``new``, ``good`` or ``bad``.
- ``conflicts`` — every record that collided with a stored one (same identity, or same device
  frame) with different content: kept whole, the stored one untouched.
- ``integrity`` — what the store found: ``conflict``, ``chain_break``, ``bad_signature``, one row
  per (vehicle, agent, seq, cause); they become ``equipment.integrity`` findings.
- ``chain_state`` — per (vehicle, agent) the seq and hash up to which the chain is verified.

The hash received for a seq (:func:`received_hashes`) is its ``links`` row's when there is one
(the first seen), else its record's ``hash``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from collector.store import Store

#: Fields that are the agent's numbering rather than the record's content (a device frame stored
#: under one seq and received again under another is the same content).
CHAIN_FIELDS: Final = ("agent", "seq", "prev")

INSERT_LINK: Final = (
    "INSERT INTO links (vehicle, agent, seq, hash, prev, state, received_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (vehicle, agent, seq, hash, key, sig, received_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
INSERT_CONFLICT: Final = (
    "INSERT INTO conflicts (vehicle, agent, seq, hash, cause, record, received_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
INSERT_INTEGRITY: Final = (
    "INSERT INTO integrity (vehicle, agent, seq, cause, detail, ts_ms, found_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)


@dataclass
class ChainPart:
    """What one batch adds to the chain tables; ``conflicts`` is filled in by :func:`write`."""

    vehicle: str
    agent: str
    received_ms: int
    #: (seq, hash, prev, state) of every record of the batch that has a seq and a hash.
    links: list[tuple[int, str, str | None, str]] = field(default_factory=list)
    #: (seq, hash, key, sig) of the batch's checkpoint.
    checkpoint: tuple[int, str, str, str] | None = None
    conflicts: list[int] = field(default_factory=list)


#: Stretches the ingest may hand the live verifier at once (beyond, it reads the store).
MAX_STRETCHES: Final = 100_000


@dataclass(frozen=True)
class Stretch:
    """Seqs ``first`` to ``last`` of an agent's chain, committed by one batch whose every
    record was new and stored, each ``prev`` checked by the ingest against the hash before it:
    ``prev`` of its first record, ``hash`` of its last."""

    first: int
    prev: str | None
    last: int
    hash: str


class Stretches:
    """What the ingest hands the live verifier (collector/verifier.py) in the same process:
    per (vehicle, agent), the stretches it committed and checked inside, by first seq. The
    verifier then checks only where one stretch meets the chain before it, and reads from the
    store what it was not handed (a batch resent, refused in part or conflicting, another
    collector's, anything before a restart). Bounded: past ``limit`` stretches the rest are
    not kept (the verifier reads those from the store)."""

    def __init__(self, limit: int = MAX_STRETCHES) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._by: dict[tuple[str, str], dict[int, Stretch]] = {}
        self._count = 0

    def add(self, found: Sequence[tuple[str, str, Stretch]]) -> None:
        """Keep the stretches of a group commit (after it committed)."""
        with self._lock:
            for vehicle, agent, stretch in found:
                if self._count >= self.limit:
                    return
                mine = self._by.setdefault((vehicle, agent), {})
                if stretch.first not in mine:
                    mine[stretch.first] = stretch
                    self._count += 1

    def take(self, vehicle: str, agent: str, first: int) -> Stretch | None:
        """The stretch starting at ``first``, no longer kept; None when there is none."""
        with self._lock:
            mine = self._by.get((vehicle, agent))
            found = mine.pop(first, None) if mine else None
            if found is not None:
                self._count -= 1
            return found

    def forget(self, vehicle: str, agent: str, upto: int) -> None:
        """Drop the agent's stretches starting at or before ``upto`` (walked past)."""
        with self._lock:
            mine = self._by.get((vehicle, agent))
            if mine is None:
                return
            for first in [first for first in mine if first <= upto]:
                del mine[first]
                self._count -= 1
            if not mine:
                del self._by[(vehicle, agent)]


def content(record_json: str) -> dict[str, Any]:
    """A stored record without its chain fields (what two copies of one frame share)."""
    rec: dict[str, Any] = orjson.loads(record_json)
    for key in CHAIN_FIELDS:
        rec.pop(key, None)
    return rec


def write_many(store: Store, tx: Any, parts: Sequence[ChainPart | None],
               rows: Sequence[list[tuple[Any, ...]]], news: Sequence[int],
               stretches: bool = False) -> list[tuple[str, str, Stretch]]:
    """Inside the transaction of a group of batches (``None``: a batch without a chain part),
    after their records (each stored one with its hash in its row): their hash-only entries,
    the conflicts each batch's records make with what is stored (``rows``: each batch's record
    rows, ``news``: how many of them were new), their checkpoints. The hash-only entries of
    every batch are inserted together, and so are the checkpoints. With ``stretches`` (a live
    verifier is running), each batch stored whole is checked inside (every ``prev`` against the
    hash before it; a break is an ``integrity`` row, as the verifier writes) and returned as a
    :class:`Stretch` for the verifier, to be handed over once committed."""
    # (the columns of each batch's links taken in C: a batch of stored records has no entry)
    entries = [(p.vehicle, p.agent, s, h, prev, st, p.received_ms)
               for p in parts if p is not None
               and list(map(_STATE, p.links)).count("stored") != len(p.links)
               for s, h, prev, st in p.links if st != "stored"]
    if entries:
        store._executemany(tx, INSERT_LINK, entries)
    # What was there under each batch's seqs: the links (hash-only entries, links of records
    # compacted or stored before 019) always — one look-up on their key per batch, or one for
    # the group — and the records' hashes where some record was not new (a resend, a conflict).
    chained = [i for i, p in enumerate(parts) if p is not None and p.links]
    stored = store._received_hashes([
        (p.vehicle, p.agent, list(map(_SEQ, p.links)), news[i] < len(rows[i]))
        for i in chained if (p := parts[i]) is not None])
    known = dict(zip(chained, stored, strict=True))
    found: list[tuple[str, str, Stretch]] = []
    breaks: list[tuple[Any, ...]] = []
    for i, (part, mine, new) in enumerate(zip(parts, rows, news, strict=True)):
        if part is not None:
            _conflicts(store, tx, part, mine, new, known.get(i, {}))
            if stretches and not part.conflicts and new == len(mine) == len(part.links):
                stretch = _checked_inside(part, breaks)
                if stretch is not None:
                    found.append((part.vehicle, part.agent, stretch))
    if breaks:
        store._executemany(tx, INSERT_INTEGRITY, breaks)
    checkpoints = [(p.vehicle, p.agent, *p.checkpoint, p.received_ms)
                   for p in parts if p is not None and p.checkpoint is not None]
    if checkpoints:
        store._executemany(tx, INSERT_CHECKPOINT, checkpoints)
    return found


def _checked_inside(part: ChainPart, breaks: list[tuple[Any, ...]]) -> Stretch | None:
    """A batch whose records were all new and stored, in seq order with no gap: each ``prev``
    checked against the hash before it (a break added to ``breaks``), and the batch as a
    :class:`Stretch`. None (nothing checked) for any other batch: the verifier reads it."""
    links = part.links
    if not links:
        return None
    first, _, prev, _ = links[0]
    last, digest, _, _ = links[-1]
    # compared column by column (in C): the seqs one after the other, each prev the hash before
    if list(map(_SEQ, links)) != list(range(first, first + len(links))):
        return None
    hashes = list(map(_HASH, links))
    prevs = list(map(_PREV, links))
    if prevs[1:] != hashes[:-1]:
        breaks.extend((part.vehicle, part.agent, at, "chain_break",
                       "prev is not the hash of the record before it", None, part.received_ms)
                      for (at, _, before, _), expected in zip(links[1:], hashes, strict=False)
                      if before != expected)
    return Stretch(first, prev, last, digest)


_SEQ: Final = itemgetter(0)
_HASH: Final = itemgetter(1)
_PREV: Final = itemgetter(2)
_STATE: Final = itemgetter(3)


def _conflicts(store: Store, tx: Any, part: ChainPart, rows: list[tuple[Any, ...]], new: int,
               known: dict[int, str]) -> None:
    """The conflicts a batch's records make with what is stored (``known``: the hash received
    before under each of its seqs that has one)."""
    if known:
        by_seq = {int(row[2]): row for row in rows}
        for seq, digest, _, _ in part.links:
            if known.get(seq) is not None and known[seq] != digest:
                _conflict(store, tx, part, seq, digest, "identity", by_seq.get(seq))
    if new < len(rows):
        _frame_conflicts(store, tx, part, rows)


def _frame_conflicts(store: Store, tx: Any, part: ChainPart, rows: list[tuple[Any, ...]]) -> None:
    """Rows not inserted although their identity was new: their device frame is stored under
    another seq. Same content is a duplicate frame (a hash-only entry ``frame``); different
    content a conflict."""
    links = {seq: (digest, prev) for seq, digest, prev, _ in part.links}
    framed = [row for row in rows if row[7] is not None and int(row[2]) not in part.conflicts]
    if not framed:
        return
    seqs = [int(row[2]) for row in framed]
    mine = {int(seq) for (seq,) in store._query(  # stored (now or before) under their own seq
        "SELECT seq FROM records WHERE vehicle = ? AND agent = ? AND seq BETWEEN ? AND ?",
        (part.vehicle, part.agent, min(seqs), max(seqs)))}
    for row in framed:
        seq, key, text = int(row[2]), row[7], str(row[9])
        if seq in mine:
            continue
        stored = store._query(
            "SELECT record FROM records WHERE vehicle = ? AND device_key = ?", (part.vehicle, key)
        )
        if not stored:
            continue
        if content(str(stored[0][0])) == content(text):
            if seq in links:
                store._executemany(tx, INSERT_LINK, [
                    (part.vehicle, part.agent, seq, *links[seq], "frame", part.received_ms)])
        elif seq in links:
            _conflict(store, tx, part, seq, links[seq][0], "frame", row)


def _conflict(
    store: Store, tx: Any, part: ChainPart, seq: int, digest: str, cause: str,
    row: tuple[Any, ...] | None,
) -> None:
    record = str(row[9]) if row is not None else "{}"
    ts_ms = int(row[4]) if row is not None else None
    store._executemany(
        tx, INSERT_CONFLICT, [(part.vehicle, part.agent, seq, digest, cause, record, part.received_ms)]
    )
    what = ("another record under the same (vehicle, agent, seq)" if cause == "identity"
            else "another record for the same device frame")
    store._executemany(
        tx, INSERT_INTEGRITY,
        [(part.vehicle, part.agent, seq, "conflict", f"{what}: both kept, the first unchanged",
          ts_ms, part.received_ms)],
    )
    if cause == "frame":  # not stored under its seq: its hash-only entry
        prev = next((p for s, _, p, _ in part.links if s == seq), None)
        store._executemany(tx, INSERT_LINK, [
            (part.vehicle, part.agent, seq, digest, prev, "conflict", part.received_ms)])
    part.conflicts.append(seq)


def received_hash(store: Store, vehicle: str, agent: str, seq: int,
                  query: bool = False) -> str | None:
    """The chain hash received for (vehicle, agent, seq): its ``links`` row's, else its stored
    record's; None when neither has one (``query``: on the writer's connection, inside its
    transaction)."""
    read = store._query if query else store._read
    link = read("SELECT hash FROM links WHERE vehicle = ? AND agent = ? AND seq = ?",
                (vehicle, agent, seq))
    if link:
        return str(link[0][0])
    row = read("SELECT hash FROM records WHERE vehicle = ? AND agent = ? AND seq = ? "
               "AND hash IS NOT NULL", (vehicle, agent, seq))
    return str(row[0][0]) if row else None


def received_hashes(store: Store, vehicle: str, agent: str, low: int, high: int,
                    query: bool = False) -> dict[int, str]:
    """:func:`received_hash` of every seq from ``low`` to ``high`` that has one."""
    read = store._query if query else store._read
    span = (vehicle, agent, low, high)
    found = {int(q): str(h) for q, h in read(
        "SELECT seq, hash FROM records WHERE vehicle = ? AND agent = ? AND seq >= ? AND seq <= ? "
        "AND hash IS NOT NULL", span)}
    found.update((int(q), str(h)) for q, h in read(
        "SELECT seq, hash FROM links WHERE vehicle = ? AND agent = ? AND seq >= ? AND seq <= ?",
        span))
    return found
