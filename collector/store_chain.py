"""The chain in the collector's store: links, checkpoints, conflicts, integrity events.

Tables (named migration ``006_chain``, ``docs/trust.md``):

- ``links`` — one row per (vehicle, agent, seq) the collector has seen from an agent: the record's
  chain ``hash`` and its ``prev``, and its ``state`` — ``stored`` (in ``records``), ``frame`` (its
  device frame was already stored under another seq, same content), ``rejected`` (a *hash-only
  entry*: the record was refused, its hash keeps the chain whole), ``conflict``. The first row for
  an identity is never replaced.
- ``checkpoints`` — the agents' signed checkpoints, one per (vehicle, agent, seq, key) however
  often a batch is resent; ``state`` ``new``, ``good`` or ``bad``.
- ``conflicts`` — every record that collided with a stored one (same identity, or same device
  frame) with different content: kept whole, the stored one untouched.
- ``integrity`` — what the store found: ``conflict``, ``chain_break``, ``bad_signature``, one row
  per (vehicle, agent, seq, cause); they become ``equipment.integrity`` findings.
- ``chain_state`` — per (vehicle, agent) the seq and hash up to which the chain is verified.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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


def content(record_json: str) -> dict[str, Any]:
    """A stored record without its chain fields (what two copies of one frame share)."""
    rec: dict[str, Any] = orjson.loads(record_json)
    for key in CHAIN_FIELDS:
        rec.pop(key, None)
    return rec


def write_many(store: Store, tx: Any, parts: Sequence[ChainPart | None],
               rows: Sequence[list[tuple[Any, ...]]], news: Sequence[int]) -> None:
    """Inside the transaction of a group of batches (``None``: a batch without a chain part):
    their links, the conflicts each batch's records make with what is stored (``rows``: each
    batch's record rows, ``news``: how many of them were new), their checkpoints. The links of
    every batch are inserted together, and so are the checkpoints."""
    links = [[(p.vehicle, p.agent, s, h, prev, st, p.received_ms) for s, h, prev, st in p.links]
             if p is not None else [] for p in parts]
    added = store._counted_inserts(tx, INSERT_LINK, links)
    # Batches with links already there (a resend, a conflict): what is stored under those
    # identities, for all of them in one go where the backend can.
    again = [i for i, (p, n) in enumerate(zip(parts, added, strict=True))
             if p is not None and p.links and n < len(p.links)]
    stored = store._link_hashes([(p.vehicle, p.agent, [s for s, _, _, _ in p.links])
                                 for i in again if (p := parts[i]) is not None])
    known = dict(zip(again, stored, strict=True))
    for i, (part, mine, new) in enumerate(zip(parts, rows, news, strict=True)):
        if part is not None:
            _conflicts(store, tx, part, mine, new, known.get(i, {}))
    checkpoints = [(p.vehicle, p.agent, *p.checkpoint, p.received_ms)
                   for p in parts if p is not None and p.checkpoint is not None]
    if checkpoints:
        store._executemany(tx, INSERT_CHECKPOINT, checkpoints)


def _conflicts(store: Store, tx: Any, part: ChainPart, rows: list[tuple[Any, ...]], new: int,
               known: dict[int, str]) -> None:
    """The conflicts a batch's records make with what is stored (``known``: the hash stored
    under each of its seqs that was there already)."""
    if known:
        by_seq = {int(row[2]): row for row in rows}
        for seq, digest, _, _ in part.links:
            if known.get(seq) is not None and known[seq] != digest:
                _conflict(store, tx, part, seq, digest, "identity", by_seq.get(seq))
    if new < len(rows):
        _frame_conflicts(store, tx, part, rows)


def _frame_conflicts(store: Store, tx: Any, part: ChainPart, rows: list[tuple[Any, ...]]) -> None:
    """Rows not inserted although their identity was new: their device frame is stored under
    another seq. Same content is a duplicate frame; different content a conflict."""
    hashes = {seq: digest for seq, digest, _, _ in part.links}
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
            store._executemany(
                tx, "UPDATE links SET state = 'frame' WHERE vehicle = ? AND agent = ? AND seq = ?",
                [(part.vehicle, part.agent, seq)],
            )
        elif seq in hashes:
            _conflict(store, tx, part, seq, hashes[seq], "frame", row)


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
    if cause == "frame":
        store._executemany(
            tx, "UPDATE links SET state = 'conflict' WHERE vehicle = ? AND agent = ? AND seq = ?",
            [(part.vehicle, part.agent, seq)],
        )
    part.conflicts.append(seq)
