"""Compacted vehicle-days in the store (migration ``012_disc``): reading them as if they were rows,
and reopening one for a late record (docs/collector.md, "The digital disc at rest").

A compacted day is one ``disc_days`` row: the day's record texts as one blob of
:mod:`collector.disc` (in the order ``Store.records`` gives them: ts, seq, row id) and their
arrival times beside it. Its records are no longer rows of ``records``; every reader adds them
back through this module (:func:`day_records`, :func:`vehicle_rows`), so what a reader sees is the
same before and after compaction. A record arriving for a compacted day (:func:`reopen_for`, in
the ingest's own transaction, before the insert) turns the day back into rows first: the insert
then skips a record already stored exactly as before, and the day is compacted again by the next
run (``disc_reopened``), its chain checked again at once (:func:`check_stretch`).

Decoded days are kept in a small cache (a page reads a day's events, samples and speeds in turn).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson
import zstandard

from collector import disc
from collector.speed_minutes import row_kmh
from collector.weighed_cache import WeighedCache
from protocols.chain import GENESIS, try_hash
from protocols.records import device_key, ts_to_ms

if TYPE_CHECKING:
    from collector.store import Store

#: Decoded days kept in memory (all stores of the process together), and the most memory they
#: may hold together (a day at 1 Hz of one bus is ≈ 170,000 rows, ≈ 90 MiB decoded: eight of
#: those held 1.2 GB of a collector's memory for good after a bundle of a week, or a few pages).
CACHE_DAYS: Final = 8
CACHE_BYTES: Final = 256 * 1024 * 1024
#: What a decoded row holds besides its text's characters (the DayRow, the text's header, the
#: integers; measured with tracemalloc on a day of bench.longstore: ≈ 150 bytes).
ROW_BYTES: Final = 150
#: Seconds a store trusts its list of compacted days before reading it again (another collector
#: sharing the store may compact in between; a record it misses is merged by the next run).
REFRESH_S: Final = 60.0
DAY_COLUMNS: Final = ("vehicle", "day", "day_start_ms", "day_end_ms", "records", "first_ms",
                      "last_ms", "first_hash", "last_hash", "codec", "made_ms")
INSERT_DAY: Final = (
    f"INSERT INTO disc_days ({', '.join(DAY_COLUMNS)}, blob, received) "
    f"VALUES ({', '.join('?' * (len(DAY_COLUMNS) + 2))})"
)


@dataclass(frozen=True)
class DiscDay:
    """One compacted vehicle-day (its blob not read)."""

    vehicle: str
    day: str
    day_start_ms: int
    day_end_ms: int
    records: int
    first_ms: int
    last_ms: int
    first_hash: str | None
    last_hash: str | None
    codec: int
    made_ms: int


@dataclass(frozen=True, slots=True)
class DayRow:
    """One record of a compacted day, with the columns a row of ``records`` has."""

    ts_ms: int
    seq: int
    agent: str
    kind: str
    device_seq: int | None
    received_ms: int
    text: str

    def row(self, vehicle: str, rec: dict[str, Any] | None = None) -> tuple[Any, ...]:
        """The row of ``records`` (``collector.store.RECORD_COLUMNS`` order) it was."""
        rec = rec if rec is not None else orjson.loads(self.text)
        # no hash nor prev in the row: a compacted record's received hash is its link's (kept,
        # or given back by unfold before the row is), collector/store_chain.py
        return (vehicle, self.agent, self.seq, rec["ts"], self.ts_ms, self.kind,
                self.device_seq, device_key(rec, self.ts_ms), None, self.text, self.received_ms,
                None, None, row_kmh(rec))


def pack_received(values: Sequence[int]) -> bytes:
    """Arrival times (ms) → zstd of their deltas of deltas."""
    return zstandard.ZstdCompressor(level=disc.LEVEL).compress(disc._dod(values))


def unpack_received(data: bytes) -> list[int]:
    """The inverse of :func:`pack_received`."""
    return disc._undod(zstandard.ZstdDecompressor().decompress(data))


def _day(row: Sequence[Any]) -> DiscDay:
    return DiscDay(str(row[0]), str(row[1]), int(row[2]), int(row[3]), int(row[4]),
                   int(row[5]), int(row[6]), None if row[7] is None else str(row[7]),
                   None if row[8] is None else str(row[8]), int(row[9]), int(row[10]))


def days(store: Store, vehicle: str | None = None, since_ms: int | None = None,
         until_ms: int | None = None) -> list[DiscDay]:
    """The compacted days (of a vehicle) holding records with since <= ts < until, in time
    order."""
    sql = f"SELECT {', '.join(DAY_COLUMNS)} FROM disc_days WHERE 1 = 1"
    params: list[Any] = []
    if vehicle is not None:
        sql += " AND vehicle = ?"
        params.append(vehicle)
    if since_ms is not None:
        sql += " AND last_ms >= ?"
        params.append(since_ms)
    if until_ms is not None:
        sql += " AND first_ms < ?"
        params.append(until_ms)
    return [_day(r) for r in store._read(sql + " ORDER BY vehicle, first_ms", tuple(params))]


def vehicles(store: Store) -> set[str]:
    """Vehicles with compacted days."""
    return {str(r[0]) for r in store._read("SELECT DISTINCT vehicle FROM disc_days")}


def count(store: Store, vehicle: str | None = None) -> int:
    """Records in compacted days (of a vehicle)."""
    if vehicle is None:
        rows = store._read("SELECT sum(records) FROM disc_days")
    else:
        rows = store._read("SELECT sum(records) FROM disc_days WHERE vehicle = ?", (vehicle,))
    return int(rows[0][0] or 0) if rows else 0


def last_received(store: Store) -> int | None:
    """The latest arrival among the records of the newest compacted day."""
    rows = store._read("SELECT received FROM disc_days ORDER BY last_ms DESC LIMIT 1")
    return max(unpack_received(bytes(rows[0][0])), default=None) if rows else None


_cache: WeighedCache[bytes, list[DayRow]] = WeighedCache(CACHE_DAYS, CACHE_BYTES)


def decode_rows(blob: bytes, received: bytes) -> list[DayRow]:
    """A day's blob and arrival times → its rows, in stored order."""
    key = hashlib.blake2b(blob + b"\0" + received, digest_size=20).digest()
    hit = _cache.get(key)
    if hit is not None:
        return hit[0]
    decoded = disc.decode_records(blob)
    arrived = unpack_received(received)
    out = []
    stamps: dict[str, int] = {}   # 1 Hz records share their second: each parsed once
    for (text, parsed), received_ms in zip(decoded, arrived, strict=True):
        rec = parsed if parsed is not None else orjson.loads(text)
        ts = rec["ts"]
        ms = stamps.get(ts)
        if ms is None:
            ms = stamps[ts] = ts_to_ms(ts)
        out.append(DayRow(ms, int(rec.get("seq") or 0), str(rec.get("agent")),
                          str(rec.get("kind")), rec.get("device_seq"), received_ms, text))
    _cache.put(key, out, sum(map(len, map(_text, out))) + ROW_BYTES * len(out))
    return out


def _text(row: DayRow) -> str:
    return row.text


def clear_cache() -> None:
    """Forget every decoded day (benchmarks and tests that time or check a cold read)."""
    _cache.clear()


def day_rows(store: Store, day: DiscDay, query: bool = False) -> list[DayRow]:
    """The rows of one compacted day (``query``: through the writer's connection, inside its
    transaction)."""
    sql = "SELECT blob, received FROM disc_days WHERE vehicle = ? AND day = ?"
    read = store._query if query else store._read
    found = read(sql, (day.vehicle, day.day))
    if not found:
        return []   # reopened or pruned since it was listed
    return decode_rows(bytes(found[0][0]), bytes(found[0][1]))


def day_records(store: Store, found: Iterable[DiscDay], since_ms: int,
                until_ms: int) -> Iterator[DayRow]:
    """The rows of the days ``found`` with since <= ts < until, in stored order."""
    for day in found:
        for row in day_rows(store, day):
            if since_ms <= row.ts_ms < until_ms:
                yield row


def vehicle_rows(store: Store, vehicle: str, since_ms: int | None = None,
                 until_ms: int | None = None) -> Iterator[DayRow]:
    """Every compacted row of a vehicle with since <= ts < until, in time order."""
    lo = -(1 << 62) if since_ms is None else since_ms
    hi = 1 << 62 if until_ms is None else until_ms
    yield from day_records(store, days(store, vehicle, lo, hi), lo, hi)


# -- chain links folded into a day (migration 016_disc_links) ---------------------------------
def pack_ends(ends: dict[str, list[tuple[int, str]]]) -> bytes:
    """The hash of the last record of each unbroken stretch of each agent's chain in a day."""
    return zstandard.ZstdCompressor(level=disc.LEVEL).compress(orjson.dumps(ends))


def folded_ends(store: Store, day: DiscDay, query: bool = False) -> dict[str, dict[int, str]] | None:
    """A day's folded links as {agent: {seq: hash}}, or None when its links are rows."""
    read = store._query if query else store._read
    found = read("SELECT links FROM disc_days WHERE vehicle = ? AND day = ?", (day.vehicle, day.day))
    if not found or found[0][0] is None:
        return None
    ends = orjson.loads(zstandard.ZstdDecompressor().decompress(bytes(found[0][0])))
    return {str(a): {int(seq): str(h) for seq, h in pairs} for a, pairs in ends.items()}


def link_rows(vehicle: str, rows: Sequence[DayRow], state: str) -> list[tuple[Any, ...]]:
    """The ``links`` rows of a day's records (hash computed from each record, its ``prev``)."""
    out = []
    for row in rows:
        rec = orjson.loads(row.text)
        digest = try_hash(rec)
        if digest is not None:
            out.append((vehicle, row.agent, row.seq, digest, rec.get("prev"), state,
                        row.received_ms))
    return out


def unfold(store: Store, tx: Any, day: DiscDay, rows: Sequence[DayRow], state: str) -> None:
    """Give a day with folded links its link rows back (``state``: stored, or pruned)."""
    from collector.store_chain import INSERT_LINK

    if folded_ends(store, day, query=True) is None:
        return
    store._executemany(tx, INSERT_LINK, link_rows(day.vehicle, rows, state))
    store._executemany(tx, "UPDATE disc_days SET links = NULL WHERE vehicle = ? AND day = ?",
                       [(day.vehicle, day.day)])


# -- late records ------------------------------------------------------------------------------
class Watermarks:
    """Per vehicle, the end of its latest compacted day (read again every :data:`REFRESH_S`):
    a record before it may belong to a compacted day; one after it cannot."""

    def __init__(self) -> None:
        self.ends: dict[str, int] = {}
        self.read_at = -REFRESH_S

    def refresh(self, store: Store, force: bool = False) -> dict[str, int]:
        """The watermarks, read again when stale (on the writer's connection: inside a
        transaction, it sees that transaction)."""
        now = time.monotonic()
        if force or now - self.read_at >= REFRESH_S:
            self.ends = {str(v): int(e) for v, e in store._query(
                "SELECT vehicle, max(day_end_ms) FROM disc_days GROUP BY vehicle")}
            self.read_at = now
        return self.ends


def reopen_for(store: Store, tx: Any, rows: Sequence[tuple[Any, ...]], now_ms: int) -> int:
    """Inside the ingest's transaction, before ``rows`` (``records`` rows) are inserted: reopen
    every compacted day one of them belongs to; how many days were reopened."""
    ends = store.disc_watermarks.refresh(store)
    if not ends:
        return 0
    late: dict[str, tuple[int, int]] = {}
    for row in rows:
        vehicle, ts_ms = row[0], int(row[4])
        end = ends.get(vehicle)
        if end is not None and ts_ms < end:
            lo, hi = late.get(vehicle, (ts_ms, ts_ms))
            late[vehicle] = (min(lo, ts_ms), max(hi, ts_ms))
    reopened = 0
    for vehicle, (lo, hi) in late.items():
        hit = store._query(
            f"SELECT {', '.join(DAY_COLUMNS)} FROM disc_days WHERE vehicle = ? AND "
            "day_end_ms > ? AND day_start_ms <= ?", (vehicle, lo, hi))
        stamps = {int(r[4]) for r in rows if r[0] == vehicle}
        for found in (_day(r) for r in hit):
            if any(found.day_start_ms <= ms < found.day_end_ms for ms in stamps):
                reopen(store, tx, found, now_ms)
                reopened += 1
    return reopened


def reopen(store: Store, tx: Any, day: DiscDay, now_ms: int) -> list[DayRow]:
    """Turn a compacted day back into rows (inside ``tx``), mark it for compaction again and
    check its chain again; its rows."""
    from collector import speed_minutes
    from collector.store import INSERT_RECORD

    got = day_rows(store, day, query=True)
    ends = folded_ends(store, day, query=True)
    unfold(store, tx, day, got, "stored")
    store._executemany(tx, INSERT_RECORD, [r.row(day.vehicle) for r in got])
    speed_minutes.reopened(store, tx, day.vehicle, day.day_start_ms, day.day_end_ms,
                           speed_minutes.default_stop_kmh())
    store._executemany(tx, "DELETE FROM disc_days WHERE vehicle = ? AND day = ?",
                       [(day.vehicle, day.day)])
    store._executemany(tx, "DELETE FROM disc_reopened WHERE vehicle = ? AND day = ?",
                       [(day.vehicle, day.day)])
    store._executemany(tx, "INSERT INTO disc_reopened (vehicle, day, reopened_ms, records) "
                       "VALUES (?, ?, ?, ?)", [(day.vehicle, day.day, now_ms, len(got))])
    check_stretch(store, tx, day.vehicle, got, now_ms, ends)
    return got


def check_stretch(store: Store, tx: Any, vehicle: str, rows: Sequence[DayRow],
                  found_ms: int, folded: dict[str, dict[int, str]] | None = None) -> int:
    """The chain check of a stretch of records (a reopened day): each record's hash must be its
    link's (for a day whose links were folded, the hash kept for the end of each stretch of
    its chain: a record changed anywhere before it changes every ``prev`` up to it), and its
    ``prev`` the hash of the record (link) before it; what fails becomes an ``integrity`` row
    (``chain_break``), as the live verifier writes. How many failed."""
    from collector.store_chain import INSERT_INTEGRITY, received_hashes

    by_agent: dict[str, list[DayRow]] = {}
    for row in rows:
        by_agent.setdefault(row.agent, []).append(row)
    problems: list[tuple[Any, ...]] = []
    for agent, mine in by_agent.items():
        seqs = [r.seq for r in mine]
        links = received_hashes(store, vehicle, agent, min(seqs) - 1, max(seqs), query=True)
        if folded is not None:
            links.update(folded.get(agent, {}))
        for row in mine:
            rec = orjson.loads(row.text)
            digest = try_hash(rec)
            before = GENESIS if row.seq == 1 else links.get(row.seq - 1)
            link = links.get(row.seq)
            if link is not None and digest != link:
                problems.append((vehicle, agent, row.seq, "chain_break",
                                 "reopened compacted record differs from the one received",
                                 row.ts_ms, found_ms))
            elif before is not None and rec.get("prev") not in (None, before):
                problems.append((vehicle, agent, row.seq, "chain_break",
                                 "prev is not the hash of the record before it (reopened day)",
                                 row.ts_ms, found_ms))
    if problems:
        store._executemany(tx, INSERT_INTEGRITY, problems)
    return len(problems)
