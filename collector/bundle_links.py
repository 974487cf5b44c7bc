"""The chain links a collector's bundle needs besides its records (``docs/roadside.md``).

A bundle is a period by time, but an agent's chain is by seq: a registrador catch-up gives older
frames later seqs, so some seqs between an agent's first and last record in the period belong to
records outside it (or to hash-only entries of records refused). For each such seq the manifest
carries the link the store holds — seq, hash, prev, the record's time if stored, the link's
state — so that ``frota verify`` follows the chain through it and tells a record outside the
period from a record missing.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

import orjson

from collector import store_disc
from collector.store import Store
from protocols.chain import try_hash

#: The most links one bundle carries; beyond, the rest show as gaps (and the summary says so).
MAX_LINKS = 100_000


#: Rows read at a time from the store's records of a chain's span.
PAGE = 10_000


class SeqRuns:
    """The seqs of one agent's records in a bundle, as runs of consecutive seqs: the records
    come in (ts, seq) order, so their seqs count up in one run but where a catch-up's frames
    (older times, later seqs) break it — a few pairs where a set held every seq (31 days of a
    bus at 1 Hz: 5.4 million integers, ≈ 300 MB)."""

    def __init__(self) -> None:
        self._runs: list[list[int]] = []  # [first, last], in the order they came
        self._merged: tuple[list[int], list[int]] | None = None  # starts, ends: sorted, merged

    def add(self, seq: int) -> None:
        """One more seq."""
        runs = self._runs
        if runs:
            run = runs[-1]
            if seq == run[1] + 1:
                run[1] = seq
                self._merged = None
                return
            if run[0] <= seq <= run[1]:
                return
        runs.append([seq, seq])
        self._merged = None

    def _sorted(self) -> tuple[list[int], list[int]]:
        if self._merged is None:
            starts: list[int] = []
            ends: list[int] = []
            for first, last in sorted(self._runs):
                if ends and first <= ends[-1] + 1:
                    ends[-1] = max(ends[-1], last)
                else:
                    starts.append(first)
                    ends.append(last)
            self._merged = (starts, ends)
        return self._merged

    def __len__(self) -> int:
        starts, ends = self._sorted()
        return sum(ends) - sum(starts) + len(starts)

    def __contains__(self, seq: object) -> bool:
        if type(seq) is not int:
            return False
        starts, ends = self._sorted()
        at = bisect.bisect_right(starts, seq) - 1
        return at >= 0 and seq <= ends[at]

    def missing(self, first: int, last: int) -> Iterator[int]:
        """The seqs strictly between ``first`` and ``last`` that are not here, in order."""
        seq = first + 1
        for start, end in zip(*self._sorted(), strict=True):
            if end <= seq - 1:
                continue
            yield from range(seq, min(start, last))
            seq = max(seq, end + 1)
            if seq >= last:
                return
        yield from range(seq, last)


def outside_links(store: Store, vehicle: str, chains: list[dict[str, Any]],
                  present: dict[str, SeqRuns], around_ms: int | None = None
                  ) -> list[dict[str, Any]]:
    """Links of the seqs missing from ``present`` between each chain's first and last seq
    (``around_ms``: the bundle's period, where the compacted days are looked at first)."""
    out: list[dict[str, Any]] = []
    for chain in chains:
        agent = str(chain["agent"])
        have = present.get(agent) or SeqRuns()
        first, last = int(chain["first_seq"]), int(chain["last_seq"])
        if last - first + 1 == len(have):
            continue
        span = (vehicle, agent, first, last)
        linked = store._read(
            "SELECT l.seq, l.hash, l.prev, l.state, r.ts FROM links l LEFT JOIN records r ON "
            "r.vehicle = l.vehicle AND r.agent = l.agent AND r.seq = l.seq WHERE l.vehicle = ? "
            "AND l.agent = ? AND l.seq > ? AND l.seq < ? ORDER BY l.seq", span)
        # the stored records' own (their hash and prev in their rows, store_chain.py), read
        # page by page: the span holds every record of the bundle too
        mine = {int(r[0]) for r in linked}
        rows = [*linked, *(r for r in _stored_in_span(store, span)
                           if int(r[0]) not in mine and int(r[0]) not in have)]
        listed = {int(r[0]) for r in rows}
        packed = _packed(store, vehicle, agent, {
            int(r[0]) for r in rows if r[4] is None and r[3] == "stored" and int(r[0]) not in have}
            | {s for s in have.missing(first, last) if s not in listed}, around_ms)
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


def _stored_in_span(store: Store, span: tuple[str, str, int, int]) -> Iterator[tuple[Any, ...]]:
    """(seq, hash, prev, 'stored', ts) of the agent's stored records with a hash strictly
    between the span's seqs, in seq order, a page at a time."""
    vehicle, agent, after, last = span
    while True:
        page = store._read(
            "SELECT seq, hash, prev, 'stored', ts FROM records WHERE vehicle = ? AND agent = ? "
            "AND seq > ? AND seq < ? AND hash IS NOT NULL ORDER BY seq LIMIT ?",
            (vehicle, agent, after, last, PAGE))
        yield from page
        if len(page) < PAGE:
            return
        after = int(page[-1][0])


def _packed(store: Store, vehicle: str, agent: str, seqs: set[int],
            around_ms: int | None = None) -> dict[int, tuple[str, str | None, str]]:
    """(hash, prev, ts) of the agent's records of ``seqs`` that are in compacted days.

    The days are read nearest ``around_ms`` (the bundle's period) first, and no further once
    every seq is found: the records a bundle's chain lacks are the catch-up frames around its
    period, and reading every compacted day of a vehicle kept a year decoded 365 days (≈ 2 s
    each) for one bundle. A day whose folded links (``links``, migration 016) do not name the
    agent holds none of its records and is not decoded. Seqs found nowhere cost the whole
    scan, as before."""
    if not seqs:
        return {}
    wanted = set(seqs)
    found: dict[int, tuple[str, str | None, str]] = {}
    for day in _nearest(store_disc.days(store, vehicle), around_ms):
        ends = store_disc.folded_ends(store, day)
        if ends is not None and agent not in ends:
            continue
        for row in store_disc.day_rows(store, day):
            if row.agent == agent and row.seq in wanted:
                rec = orjson.loads(row.text)
                prev = rec.get("prev")
                found[row.seq] = (str(try_hash(rec)), None if prev is None else str(prev),
                                  str(rec["ts"]))
                wanted.discard(row.seq)
        if not wanted:
            break
    return found


def _nearest(days: list[store_disc.DiscDay], around_ms: int | None
             ) -> list[store_disc.DiscDay]:
    """``days`` by their distance in time from ``around_ms`` (time order without it)."""
    if around_ms is None:
        return days
    return sorted(days, key=lambda d: max(0, d.first_ms - around_ms, around_ms - d.last_ms))
