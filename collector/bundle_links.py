"""The chain links a collector's bundle needs besides its records (``docs/roadside.md``).

A bundle is a period by time, but an agent's chain is by seq: a registrador catch-up gives older
frames later seqs, so some seqs between an agent's first and last record in the period belong to
records outside it (or to hash-only entries of records refused). For each such seq the manifest
carries the link the store holds — seq, hash, prev, the record's time if stored, the link's
state — so that ``frota verify`` follows the chain through it and tells a record outside the
period from a record missing.
"""

from __future__ import annotations

from typing import Any

import orjson

from collector import store_disc
from collector.store import Store
from protocols.chain import try_hash

#: The most links one bundle carries; beyond, the rest show as gaps (and the summary says so).
MAX_LINKS = 100_000


def outside_links(store: Store, vehicle: str, chains: list[dict[str, Any]],
                  present: dict[str, set[int]]) -> list[dict[str, Any]]:
    """Links of the seqs missing from ``present`` between each chain's first and last seq."""
    out: list[dict[str, Any]] = []
    for chain in chains:
        agent = str(chain["agent"])
        have = present.get(agent, set())
        first, last = int(chain["first_seq"]), int(chain["last_seq"])
        if last - first + 1 == len(have):
            continue
        span = (vehicle, agent, first, last)
        linked = store._read(
            "SELECT l.seq, l.hash, l.prev, l.state, r.ts FROM links l LEFT JOIN records r ON "
            "r.vehicle = l.vehicle AND r.agent = l.agent AND r.seq = l.seq WHERE l.vehicle = ? "
            "AND l.agent = ? AND l.seq > ? AND l.seq < ? ORDER BY l.seq", span)
        # the stored records' own (their hash and prev in their rows, store_chain.py)
        mine = {int(r[0]) for r in linked}
        rows = [*linked, *(r for r in store._read(
            "SELECT seq, hash, prev, 'stored', ts FROM records WHERE vehicle = ? AND agent = ? "
            "AND seq > ? AND seq < ? AND hash IS NOT NULL ORDER BY seq", span)
            if int(r[0]) not in mine and int(r[0]) not in have)]
        listed = {int(r[0]) for r in rows}
        packed = _packed(store, vehicle, agent, {
            int(r[0]) for r in rows if r[4] is None and r[3] == "stored" and int(r[0]) not in have}
            | {s for s in range(first + 1, last) if s not in have and s not in listed})
        found = [(int(seq), str(digest), None if prev is None else str(prev), str(state),
                  None if ts is None else str(ts)) for seq, digest, prev, state, ts in rows]
        # the links folded into compacted days (collector/compaction.py): from the records
        found += [(seq, digest, prev, "stored", ts) for seq, (digest, prev, ts) in packed.items()
                  if seq not in listed]
        for seq, digest, prev, state, ts in sorted(found):
            if seq in have:
                continue
            when = packed[seq][2] if ts is None and seq in packed else ts
            out.append({"agent": agent, "seq": seq, "hash": digest, "prev": prev,
                        "state": state, "ts": when})
            if len(out) >= MAX_LINKS:
                return out
    return out


def _packed(store: Store, vehicle: str, agent: str,
            seqs: set[int]) -> dict[int, tuple[str, str | None, str]]:
    """(hash, prev, ts) of the agent's records of ``seqs`` that are in compacted days."""
    if not seqs:
        return {}
    found: dict[int, tuple[str, str | None, str]] = {}
    for row in store_disc.vehicle_rows(store, vehicle):
        if row.agent == agent and row.seq in seqs:
            rec = orjson.loads(row.text)
            prev = rec.get("prev")
            found[row.seq] = (str(try_hash(rec)), None if prev is None else str(prev),
                              str(rec["ts"]))
    return found
