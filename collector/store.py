"""The collector's store: canonical records kept once, rejects kept whole, per-vehicle state.

Two backends behind one interface (:class:`Store`): SQLite through sqlite-utils, the embedded
default (``collector/store_sqlite.py``), and PostgreSQL through psycopg
(``collector/store_pg.py``). Both run the same SQL for the hot path, except the records of a
group commit, which PostgreSQL writes by COPY (:meth:`Store._counted_inserts`), and one list of
named migrations (``collector/store_schema.py``). The layout and the choice of keys are explained
in ``docs/collector.md``.

Identity of a record:

- (``vehicle``, ``agent``, ``seq``) — the agent's numbering, unique;
- (``vehicle``, ``device_key``) where the record has a ``device_seq`` — ``device_key`` is
  ``kind:part:device_seq:ts_ms``, unique. The same registrador frame received live and again by a
  history download (under another agent ``seq``) has the same kind, device frame number and
  device timestamp, so it is stored once; ``part`` (the driver record's ``slot``, the device
  record's ``status``, the door record's ``door``) keeps apart the several records of one kind a
  frame may carry (firmware-notes/registrador.md, "Record identity"), and the device timestamp keeps a frame counter that wraps or restarts (a replaced
  registrador) from merging two different frames.

A record that collides with either key is already stored: the insert skips it and the collector
acknowledges it as stored.
"""

from __future__ import annotations

import heapq
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson

from collector import speed_minutes, store_chain, store_disc
from collector import store_rejects as rejects_bound
from collector.store_chain import ChainPart, Stretches
from collector.store_rejects import RejectsTally
from collector.store_summary import StoreSummaries
from protocols.records import Record, device_key, ts_to_ms

#: Columns of ``records`` in the order of :func:`record_row`'s tuples.
RECORD_COLUMNS: Final = (
    "vehicle",
    "agent",
    "seq",
    "ts",
    "ts_ms",
    "kind",
    "device_seq",
    "device_key",
    "raw",
    "record",
    "received_ms",
    "hash",
    "prev",
    "kmh",
)
REJECT_COLUMNS: Final = (
    "received_ms",
    "topic",
    "vehicle",
    "agent",
    "first_seq",
    "last_seq",
    "reason",
    "payload",
)

#: Positional parameters (faster than named ones); ON CONFLICT DO NOTHING covers both keys.
INSERT_RECORD: Final = (
    f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(RECORD_COLUMNS))}) ON CONFLICT DO NOTHING"
)
INSERT_REJECT: Final = (
    f"INSERT INTO rejects ({', '.join(REJECT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(REJECT_COLUMNS))})"
)
PAGE: Final = 1000
#: Columns of ``findings`` in the order of :meth:`Store.replace_findings`'s tuples.
FINDING_COLUMNS: Final = ("id", "rule", "vehicle", "driver", "start_ms", "end_ms", "finding")
INSERT_FINDING: Final = (
    f"INSERT INTO findings ({', '.join(FINDING_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(FINDING_COLUMNS))})"
)


class StoreError(Exception):
    """The database cannot be opened or used (the message says which and why)."""


@dataclass(frozen=True)
class Reject:
    """A payload, or one record of it, that the collector could not accept."""

    received_ms: int
    topic: str
    vehicle: str | None
    agent: str | None
    first_seq: int | None
    last_seq: int | None
    reason: str
    payload: bytes

    def row(self) -> tuple[Any, ...]:
        """The positional row for ``rejects``."""
        return (
            self.received_ms,
            self.topic,
            self.vehicle,
            self.agent,
            self.first_seq,
            self.last_seq,
            self.reason,
            self.payload,
        )


@dataclass(frozen=True)
class VehicleState:
    """What the store knows of a vehicle: latest record time and latest arrival."""

    vehicle: str
    last_ts_ms: int
    last_received_ms: int
    agent: str | None


def record_row(rec: Record, received_ms: int, digest: str | None = None,
               prev: str | None = None, ts_ms: int | None = None,
               text: str | None = None) -> tuple[Any, ...]:
    """The positional row for ``records`` of a validated record with ``agent`` and ``seq``;
    ``digest`` and ``prev``: its chain hash as received and its ``prev`` (collector/store_chain.py),
    None when not chained (no ``prev`` is kept without a hash); ``ts_ms``: its ``ts`` in ms, when
    the caller has read it already (the validation does); ``text``: the record's JSON to keep,
    when the caller has it — its canonical form, which the ingest writes to hash it
    (collector/intake.py): the same JSON values, keys sorted, a whole double written as the
    integer it equals (docs/records.md, "Canonical form"). Without it the record is written
    here, keys in the order received."""
    if ts_ms is None:
        ts_ms = ts_to_ms(rec["ts"])
    kind = rec["kind"]
    # the kmh column (migration 022_records_kmh): speed_minutes.row_kmh, inlined (the hot path)
    kmh = rec.get("kmh") if kind == "speed" or kind == "position" else None
    if type(kmh) is not float:
        kmh = float(kmh) if type(kmh) is int else None
    return (
        rec["vehicle"],
        rec["agent"],
        rec["seq"],
        rec["ts"],
        ts_ms,
        kind,
        rec.get("device_seq"),
        device_key(rec, ts_ms),
        None,  # raw: stored once, in the record's JSON (the canonical record the chain hashes)
        # orjson: the same compact JSON as records.dumps (keys in received order), 5x faster
        orjson.dumps(rec).decode() if text is None else text,
        received_ms,
        digest,
        prev if digest is not None else None,  # the chain's two fields go together
        kmh,
    )

class Store(StoreSummaries, ABC):
    """The interface both backends implement; every method is safe to call from any thread.
    Its read-only summaries (for readers outside the collector) are in
    :mod:`collector.store_summary`."""

    #: SQL of the per-vehicle upsert (dialects differ on max/greatest).
    upsert_vehicle_sql: str = ""
    #: ``sqlite`` or ``postgresql`` (where a caller's SQL must differ, e.g. the prune's gate).
    dialect: str = "sqlite"

    def __init__(self, rejects_max_bytes: int | None = None) -> None:
        self._lock = threading.RLock()
        #: Bound on the payload bytes kept in ``rejects`` (None: no bound), see :meth:`put_many`.
        self.rejects_max_bytes = rejects_max_bytes
        self.rejects_tally = RejectsTally()
        #: Where each vehicle's compacted days end (collector/store_disc.py: late records).
        self.disc_watermarks = store_disc.Watermarks()
        #: The stretches of the chain the ingest hands a live verifier of this store (set by
        #: collector/verifier.py; None: no verifier, nothing is kept).
        self.fresh_stretches: Stretches | None = None

    def _load_rejects_tally(self) -> None:
        """Count the kept and dropped payload bytes of ``rejects`` (once, when opened)."""
        self.rejects_tally = rejects_bound.load_tally(self._read)

    # -- backend hooks ---------------------------------------------------------------------
    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """A context manager: one transaction, committed on exit, rolled back on error."""

    @abstractmethod
    def _executemany(self, tx: Any, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        """Run ``sql`` for every row inside ``tx``; return how many rows it changed."""

    def _counted_inserts(self, tx: Any, sql: str,
                         batches: Sequence[Sequence[tuple[Any, ...]]]) -> list[int]:
        """Run the ``INSERT … ON CONFLICT DO NOTHING`` ``sql`` for the rows of several batches
        (rows whose first three columns are their identity: vehicle, agent, seq); how many rows
        of each batch were new. Here one statement per batch; a backend may do all at once."""
        return [self._executemany(tx, sql, rows) if rows else 0 for rows in batches]

    def _received_hashes(self, wanted: Sequence[tuple[str, str, Sequence[int], bool]]
                         ) -> list[dict[int, str]]:
        """Inside the ingest's transaction: for each (vehicle, agent, seqs, records), the chain
        hash received before under those seqs (seq -> hash; at least those of ``seqs`` that
        have one): the ``links`` row's, else (``records`` True) the stored record's own
        (collector/store_chain.py). Here one or two queries each; a backend may do all at
        once."""
        out: list[dict[int, str]] = []
        for vehicle, agent, seqs, records in wanted:
            span = (vehicle, agent, min(seqs), max(seqs))
            found: dict[int, str] = dict(self._query(
                "SELECT seq, hash FROM records WHERE vehicle = ? AND agent = ? AND seq BETWEEN ? "
                "AND ? AND hash IS NOT NULL", span)) if records else {}
            found.update(self._query(
                "SELECT seq, hash FROM links WHERE vehicle = ? AND agent = ? AND seq BETWEEN ? "
                "AND ?", span))
            out.append(found)
        return out

    @abstractmethod
    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query."""

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query outside any transaction (a backend may use its own
        connection for it, so that readers do not wait for the writer)."""
        with self._lock:
            return self._query(sql, params)

    @abstractmethod
    def migrate(self) -> list[str]:
        """Apply the named migrations not applied yet; return their names."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the data lives (a path or a DSN without password), for messages."""

    # -- writes ----------------------------------------------------------------------------
    def put(
        self,
        rows: Sequence[tuple[Any, ...]],
        rejects: Sequence[Reject] = (),
        vehicles: Sequence[tuple[str, int, int, str | None]] = (),
    ) -> int:
        """Store record rows (skipping those already stored), rejects and vehicle state in ONE
        transaction; return how many records were new. Returns only after the commit."""
        return self.put_many([(rows, rejects, vehicles)])[0]

    def put_many(
        self,
        groups: Sequence[
            tuple[
                Sequence[tuple[Any, ...]],
                Sequence[Reject],
                Sequence[tuple[str, int, int, str | None]],
            ]
        ],
        chains: Sequence[ChainPart | None] = (),
    ) -> list[int]:
        """:meth:`put` for several batches in ONE transaction (a group commit); how many records
        of each batch were new. Returns only after the commit. Past ``rejects_max_bytes`` the
        same transaction empties the oldest rejects' payloads (``collector/store_rejects.py``)."""
        with self._lock:
            tally = self.rejects_tally
            with self._transaction() as tx:
                for rows, _, _ in groups:
                    if rows:  # a record of a compacted day reopens it first (store_disc.py)
                        store_disc.reopen_for(self, tx, rows, int(rows[0][10]))
                # Each kind of row of the whole group in one statement where the backend can
                # (collector/store_pg.py: one round trip each, not one per batch).
                counts = self._counted_inserts(tx, INSERT_RECORD, [rows for rows, _, _ in groups])
                speed_minutes.add(self, tx, [rows for rows, _, _ in groups], counts,
                                  speed_minutes.default_stop_kmh())  # the Disco do dia's
                parts = [chains[i] if i < len(chains) else None for i in range(len(groups))]
                fresh = self.fresh_stretches
                found = store_chain.write_many(self, tx, parts,
                                               [list(rows) for rows, _, _ in groups], counts,
                                               stretches=fresh is not None)
                for _, rejects, _ in groups:
                    if rejects:
                        self._executemany(tx, INSERT_REJECT, [r.row() for r in rejects])
                        added = sum(len(r.payload) for r in rejects)
                        tally = replace(tally, kept_bytes=tally.kept_bytes + added)
                vehicles = _latest_states(row for _, _, rows in groups for row in rows)
                if vehicles:
                    self._executemany(tx, self.upsert_vehicle_sql, vehicles)
                if self.rejects_max_bytes is not None and tally.kept_bytes > self.rejects_max_bytes:
                    tally = rejects_bound.drop_oldest_payloads(
                        self._query,
                        lambda sql, rows: self._executemany(tx, sql, rows),
                        tally,
                        self.rejects_max_bytes,
                    )
            self.rejects_tally = tally  # committed
            if found and fresh is not None:
                fresh.add(found)
        return counts

    def apply(self, statements: Sequence[tuple[str, Sequence[tuple[Any, ...]]]]) -> None:
        """Run each (sql, rows) in ONE transaction (the chain verifier's bookkeeping); none when
        no statement has rows (a pass that found nothing new takes no write lock)."""
        if not any(rows for _, rows in statements):
            return
        with self._lock, self._transaction() as tx:
            for sql, rows in statements:
                if rows:
                    self._executemany(tx, sql, rows)

    def replace_findings(self, rows: Sequence[tuple[Any, ...]], as_of_ms: int) -> None:
        """Replace every stored finding by ``rows`` (tuples in :data:`FINDING_COLUMNS` order) and
        remember the ``as_of`` they were judged at, in ONE transaction."""
        with self._lock, self._transaction() as tx:
            self._executemany(tx, "DELETE FROM findings", [()])
            if rows:
                self._executemany(tx, INSERT_FINDING, rows)
            self._executemany(tx, "DELETE FROM findings_state WHERE name = ?", [("as_of_ms",)])
            self._executemany(
                tx, "INSERT INTO findings_state (name, value) VALUES (?, ?)", [("as_of_ms", as_of_ms)]
            )

    # -- reads -----------------------------------------------------------------------------
    def findings(
        self, vehicle: str | None = None, since_ms: int | None = None
    ) -> tuple[list[str], int | None]:
        """The stored findings' JSON (of a vehicle; ending at or after ``since``, or still open),
        unordered, and the ``as_of`` they were judged at (None: never evaluated)."""
        # One statement, so one snapshot on both backends: the as_of row, then the findings.
        sql = (
            "SELECT 0, NULL, value FROM findings_state WHERE name = 'as_of_ms' "
            "UNION ALL SELECT 1, finding, NULL FROM findings WHERE 1 = 1"
        )
        params: list[Any] = []
        if vehicle is not None:
            sql += " AND vehicle = ?"
            params.append(vehicle)
        if since_ms is not None:
            sql += " AND (end_ms IS NULL OR end_ms >= ?)"
            params.append(since_ms)
        as_of: int | None = None
        found: list[str] = []
        for first, text, value in self._read(sql, tuple(params)):
            if int(first) == 0:
                as_of = int(value)
            else:
                found.append(str(text))
        return found, as_of

    def newest_record_id(self) -> int:
        """The newest stored record's row id (0 for an empty store): cheap change detection."""
        return int(self._read("SELECT max(id) FROM records")[0][0] or 0)

    def vehicle_ids(self) -> list[str]:
        """Every vehicle with stored records (from ``records`` and the compacted days: operator
        entries included)."""
        return sorted(str(row[0]) for row in self._read(
            "SELECT DISTINCT vehicle FROM records UNION SELECT DISTINCT vehicle FROM disc_days"))

    def records(
        self, vehicle: str, since_ms: int | None = None, until_ms: int | None = None
    ) -> Iterator[str]:
        """The stored records' JSON of a vehicle with since <= ts < until, in (ts, seq) order
        (the compacted days' records among the rows, collector/store_disc.py)."""
        lo = since_ms if since_ms is not None else -(1 << 62)
        hi = until_ms if until_ms is not None else 1 << 62
        found = store_disc.days(self, vehicle, lo, hi)
        if not found:
            for _, _, text in self._rows(vehicle, lo, hi):
                yield text
            return
        packed = ((r.ts_ms, r.seq, r.text) for r in store_disc.day_records(self, found, lo, hi))
        for _, _, text in heapq.merge(self._rows(vehicle, lo, hi), packed,
                                      key=lambda item: (item[0], item[1])):
            yield text

    def _rows(self, vehicle: str, lo: int, hi: int) -> Iterator[tuple[int, int, str]]:
        """(ts, seq, JSON) of the vehicle's rows of ``records`` with lo <= ts < hi, in (ts,
        seq, id) order."""
        after: tuple[int, int, int] = (lo - 1, 1 << 62, 1 << 62)
        while True:
            page = self._read(  # page by page: nothing is held between pages
                "SELECT ts_ms, seq, id, record FROM records "
                "WHERE vehicle = ? AND ts_ms >= ? AND ts_ms < ? AND (ts_ms, seq, id) > (?, ?, ?) "
                "ORDER BY ts_ms, seq, id LIMIT ?",
                (vehicle, max(lo, after[0]), hi, *after, PAGE),
            )
            for ts_ms, seq, _, text in page:
                yield int(ts_ms), int(seq), str(text)
            if len(page) < PAGE:
                return
            last = page[-1]
            after = (int(last[0]), int(last[1]), int(last[2]))

    def records_after(self, last_id: int, limit: int = PAGE) -> list[tuple[int, str]]:
        """Records stored after row ``last_id``, in arrival order: (id, JSON) — for readers that
        follow the store (the live rules keep their position as an id)."""
        rows = self._read(
            "SELECT id, record FROM records WHERE id > ? ORDER BY id LIMIT ?", (last_id, limit)
        )
        return [(int(i), str(text)) for i, text in rows]

    def vehicles(self) -> list[VehicleState]:
        """The state of every vehicle that has stored records."""
        rows = self._read(
            "SELECT vehicle, last_ts_ms, last_received_ms, agent FROM vehicles ORDER BY vehicle"
        )
        return [VehicleState(str(v), int(t), int(r), a) for v, t, r, a in rows]

    def reject_count(self) -> int:
        """How many rejects are kept."""
        return int(self._read("SELECT count(*) FROM rejects")[0][0])

    def rejects(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest rejects (newest first), payload as bytes (empty, with ``dropped_bytes``
        its size, when it was dropped to keep the bound)."""
        rows = self._read(
            f"SELECT {', '.join(REJECT_COLUMNS)}, dropped_bytes FROM rejects "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [
            {
                **dict(zip(REJECT_COLUMNS, (*row[:-2], bytes(row[-2])), strict=True)),
                "dropped_bytes": int(row[-1]),
            }
            for row in rows
        ]

    def count(self, vehicle: str | None = None) -> int:
        """How many records are stored (for one vehicle, or all), compacted days included."""
        if vehicle is None:
            rows = int(self._read("SELECT count(*) FROM records")[0][0])
        else:
            rows = int(self._read("SELECT count(*) FROM records WHERE vehicle = ?",
                                  (vehicle,))[0][0])
        return rows + store_disc.count(self, vehicle)


def _latest_states(rows: Iterable[tuple[str, int, int, str | None]]
                   ) -> list[tuple[str, int, int, str | None]]:
    """One ``vehicles`` row per vehicle for the rows of a group (a group holds many batches of
    few vehicles): the greatest record time and arrival, the last agent — what upserting every
    row in turn would leave."""
    out: dict[str, tuple[str, int, int, str | None]] = {}
    for row in rows:
        had = out.get(row[0])
        out[row[0]] = row if had is None else (row[0], max(had[1], row[1]),
                                               max(had[2], row[2]), row[3])
    return list(out.values())


def open_store(
    url: str,
    *,
    create: bool = True,
    read_only: bool = False,
    synchronous: str = "full",
    rejects_max_bytes: int | None = None,
) -> Store:
    """Open the store named by ``url``: a ``postgresql://`` DSN or a SQLite file path
    (``rejects_max_bytes``: the bound on the rejects' payload bytes, None for none;
    ``read_only``: a reader beside the running collector, which never migrates nor writes)."""
    if url.startswith(("postgresql://", "postgres://")):
        from collector.store_pg import PostgresStore

        return PostgresStore(url, read_only=read_only, rejects_max_bytes=rejects_max_bytes)
    from collector.store_sqlite import SQLiteStore

    return SQLiteStore(
        url,
        create=create,
        read_only=read_only,
        synchronous=synchronous,
        rejects_max_bytes=rejects_max_bytes,
    )
