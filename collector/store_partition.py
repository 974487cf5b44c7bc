"""A partition's stored records in ``frota check``'s order, read for many vehicles at once.

The live rules replay a partition (collector/live_rules.py) from a checkpoint: every record of
its vehicles from the boundary on. Read vehicle by vehicle (:meth:`Store.records`), that is two
queries per vehicle per evaluation, whether it sent anything or not — with a fleet of thousands
of buses evaluated every second, thousands of round trips to the database per second, holding
the store's lock that the ingest also needs. Here the vehicles without compacted days are read
together, a window of device time at a time (``vehicle IN (…)`` and a ``ts_ms`` range: the
``(vehicle, ts_ms, seq)`` index), and sorted here; a vehicle with compacted days in the range
is read by :meth:`Store.records` (the days and the rows merged), and the streams merged.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Iterator, Sequence
from typing import Any, Final

import orjson

from collector import store_disc
from collector.store import Store
from protocols.records import ts_to_ms

#: Device time read per query: bounds the records held in memory (a fleet's 10 s).
WINDOW_MS: Final = 10_000
#: Vehicles named in one query (well under SQLite's and PostgreSQL's limits on parameters).
CHUNK: Final = 500

Item = tuple[int, str, int, str, dict[str, Any]]


def _item(text: str) -> Item:
    rec: dict[str, Any] = orjson.loads(text)
    return ts_to_ms(rec["ts"]), rec["vehicle"], rec.get("seq") or 0, rec.get("agent") or "", rec


#: ``frota check``'s order of items: (ts, vehicle, seq, agent).
_key: Final = operator.itemgetter(0, 1, 2, 3)


def partition_records(store: Store, vehicles: Sequence[str], since_ms: int | None,
                      until_ms: int) -> Iterator[Item]:
    """(ts ms, vehicle, seq, agent, record) of every stored record of ``vehicles`` with
    since <= ts < until, in (ts, vehicle, seq, agent) order."""
    lo = since_ms if since_ms is not None else -(1 << 62)
    wanted = set(vehicles)
    compacted = sorted({day.vehicle for day in store_disc.days(store, None, lo, until_ms)}
                       & wanted)
    plain = sorted(wanted - set(compacted))
    streams: list[Iterator[Item]] = []
    if plain:
        streams.append(_windows(store, plain, lo, until_ms))
    for vehicle in compacted:
        streams.append(_item(text) for text in store.records(vehicle, lo, until_ms))
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=_key)


def _windows(store: Store, vehicles: list[str], lo: int, hi: int) -> Iterator[Item]:
    chunks = [vehicles[i:i + CHUNK] for i in range(0, len(vehicles), CHUNK)]
    start = lo
    while start < hi:
        end = min(start + WINDOW_MS, hi)
        texts = [text for chunk in chunks for text in _read(store, chunk, start, end)]
        if not texts:  # nothing in this window: jump to the next record, if any
            nxt = _next_ts(store, chunks, end, hi)
            if nxt is None:
                return
            start = nxt
            continue
        yield from sorted((_item(text) for text in texts), key=_key)
        start = end


def _read(store: Store, chunk: list[str], start: int, end: int) -> list[str]:
    marks = ", ".join("?" * len(chunk))
    rows = store._read(f"SELECT record FROM records WHERE vehicle IN ({marks}) "
                       "AND ts_ms >= ? AND ts_ms < ?", (*chunk, start, end))
    return [str(text) for (text,) in rows]


def _next_ts(store: Store, chunks: list[list[str]], start: int, hi: int) -> int | None:
    found: list[int] = []
    for chunk in chunks:
        marks = ", ".join("?" * len(chunk))
        rows = store._read(f"SELECT min(ts_ms) FROM records WHERE vehicle IN ({marks}) "
                           "AND ts_ms >= ? AND ts_ms < ?", (*chunk, start, hi))
        if rows and rows[0][0] is not None:
            found.append(int(rows[0][0]))
    return min(found) if found else None
