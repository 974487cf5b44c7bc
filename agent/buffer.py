"""The durable buffer on the Pi: SQLite in WAL mode, records numbered 1, 2, 3, … with no gaps.

A record is *captured* once its transaction commits. ``seq`` is assigned inside the committing
transaction (the next number after the last one given, kept in ``meta``), so a crash or SIGKILL
can never leave a gap or reuse a number. A device frame already captured (received live and
again by a history download) is skipped whole. Nothing is deleted before the collector confirms
it: each record has an upload state (pending, stored, rejected with the collector's reason;
stored kept as ranges of seqs, ``agent/upload_states.py``); only stored records are deleted:
past the retention, or the oldest first on a full disk.

One :class:`Buffer` (one sqlite3 connection) per thread: WAL lets the uplink read while the
writer (``agent/writer.py``) commits. Its parts, one job each: how the database is opened and
made durable (``agent/buffer_db.py``), the schema and its named migrations
(``agent/schema.py``), records turned into numbered, chained rows (``agent/buffer_rows.py``)
and the frame runs that know what was captured (``agent/frames.py``), the collector's answers
as upload states (``agent/upload_states.py``), the disk's reserve (``agent/diskroom.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import orjson

from agent import hostclock
from agent.buffer_db import CONFLICT as CONFLICT  # re-exported: the buffer's readers use them
from agent.buffer_db import MAX_REPLAY_SEQ as MAX_REPLAY_SEQ
from agent.buffer_db import PENDING as PENDING
from agent.buffer_db import REJECTED as REJECTED
from agent.buffer_db import STORED as STORED
from agent.buffer_db import WAL_PAGES as WAL_PAGES
from agent.buffer_db import BufferError as BufferError
from agent.buffer_db import Counts as Counts
from agent.buffer_db import connect, is_full
from agent.buffer_rows import (
    Ready,
    agent_json,
    build_rows,
    hash_hex,
    insert_rows,
    prepare,
    sent_body,
)
from agent.diskroom import release_reserve, reserve_path
from agent.schema import MIGRATIONS as MIGRATIONS  # re-exported: the tests check the names
from agent.schema import migrate, transaction
from agent.upload_states import (
    HELD,
    count_states,
    mark_answers,
    not_stored,
    pending_between,
    pending_rows,
    replay,
    stored_first,
)
from protocols.chain import GENESIS, record_hash
from protocols.records import Record, RecordError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

def _wall_ms() -> int:
    # Diagnostics only (when a record was captured or acknowledged); never a record's ts.
    return hostclock.wall_ms()


class Buffer:
    """One connection to the buffer: capture records, read pending ones, mark answers."""

    def __init__(
        self, path: str | Path, max_bytes: int | None = None, keep_free: int | None = None
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        #: Bytes left free on the filesystem: the buffer stops growing there, as at max_bytes,
        #: so a full disk never leaves SQLite without room to mark, checkpoint and evict.
        self.keep_free = keep_free
        self._page_size: int | None = None
        self.conn = connect(self.path, max_bytes)
        try:
            migrate(self.conn)
            self.agent = self._agent_id()
            self._agent_json = agent_json(self.agent)
        except sqlite3.Error as err:
            self.conn.close()
            raise BufferError(f"cannot prepare the buffer {self.path}: {err}") from err

    def _agent_id(self) -> str:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'agent'").fetchone()
        if row is not None:
            return str(row[0])
        with transaction(self.conn):
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'agent'").fetchone()
            agent = str(row[0]) if row is not None else str(uuid.uuid4())
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('agent', ?)", (agent,))
        return agent

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    @contextlib.contextmanager
    def _failing(self, doing: str, *, full: bool = True) -> Iterator[None]:
        """A sqlite3 error in the block becomes ``BufferError("cannot <doing> the buffer …")``,
        marked ``full`` on SQLITE_FULL when ``full`` is asked."""
        try:
            yield
        except sqlite3.Error as err:
            raise BufferError(
                f"cannot {doing} the buffer {self.path}: {err}", full=full and is_full(err)
            ) from err

    def captured_runs(self, source: str, first: int, last: int) -> list[tuple[int, int]]:
        """The runs of frames numbered ``first``…``last`` captured from ``source`` (clipped to
        that range, in order): what a catch-up need not ask for again."""
        rows = self.conn.execute(
            "SELECT first, last FROM captured_frames WHERE source = ? AND last >= ? AND first <= ? "
            "ORDER BY first",
            (source, first, last),
        ).fetchall()
        return [(max(first, int(a)), min(last, int(b))) for a, b in rows]

    def add(
        self, items: Sequence[tuple[str, Record]], states: Mapping[str, str] | None = None
    ) -> list[int]:
        """Capture (source, record) pairs in one transaction; return the seqs given.

        ``states`` (source → JSON) are saved in the same transaction (``meta`` key
        ``state:<source>``): a decoder's memory that must match the records committed (the door
        counters' baselines), read back by :meth:`source_state` after a restart.

        Consecutive records of one source with the same ``device_seq`` and ``ts`` are one device
        frame (a decoder gives a frame's records together). A frame already captured — received
        live and again by a history download — is skipped whole, as the registrador decoder
        asks (its records may differ by the driver changes it reports); a record whose
        :func:`device_key` is already there is skipped too. Skipped records take no seq.
        """
        return self.add_ready([(source, prepare(rec, self.agent)) for source, rec in items],
                              states)

    def add_ready(
        self, items: Sequence[tuple[str, Ready]], states: Mapping[str, str] | None = None
    ) -> list[int]:
        """:meth:`add` of records already prepared (:func:`agent.buffer_rows.prepare`, done by
        the writer's callers in their own threads)."""
        if not items and not states:
            return []
        now = _wall_ms()
        seqs: list[int] = []
        with self._failing("write to"):
            self._limit_growth()
            with transaction(self.conn):
                seq, prev = self._tail()
                rows, last_hash = build_rows(self.conn, self.agent, list(items), seq + 1, prev,
                                             now)
                if rows:
                    insert_rows(self.conn, rows, now)
                    seqs = [row[0] for row in rows]
                    self.conn.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_seq', ?), "
                        "('last_hash', ?)", (str(seqs[-1]), last_hash))
                for source, state in (states or {}).items():
                    self.conn.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                        (f"state:{source}", state),
                    )
        return seqs

    def _limit_growth(self) -> None:
        """Cap the database (``max_page_count``) so ``keep_free`` bytes stay free on its disk."""
        if self.keep_free is None:
            return
        try:
            fs = os.statvfs(self.path.parent)
        except OSError:
            return
        if self._page_size is None:  # set when the database was made
            self._page_size = int(self.conn.execute("PRAGMA page_size").fetchone()[0])
        page = self._page_size
        pages = int(self.conn.execute("PRAGMA page_count").fetchone()[0])
        room = fs.f_bavail * fs.f_frsize - self.keep_free
        # A new page takes room twice until checkpointed: in the WAL, then in the database.
        allowed = pages + max(0, room) // (2 * page)
        if self.max_bytes is not None:
            allowed = min(allowed, max(1, self.max_bytes // page))
        self.conn.execute(f"PRAGMA max_page_count={allowed}")

    def source_state(self, source: str) -> str | None:
        """The state last saved with ``source``'s records (see :meth:`add`), or None."""
        row = self.conn.execute(
            "SELECT value FROM meta WHERE key = ?", (f"state:{source}",)
        ).fetchone()
        return None if row is None else str(row[0])

    def evict_oldest(self, limit: int) -> int:
        """Make room on a full disk: delete up to ``limit`` of the oldest *stored* records.

        Records the collector has not stored (pending, rejected) are never deleted.
        """
        with self._failing("evict from"), transaction(self.conn):
            seqs = stored_first(self.conn, limit)
            if not seqs:
                return 0
            # The oldest stored seqs, in order: those between the first and the last of them
            # that are not stored (rejected, conflicts) stay.
            deleted = self.conn.execute(
                "DELETE FROM records WHERE seq BETWEEN ? AND ? AND state < 2 AND "
                + HELD.format(seq="records.seq"),
                (seqs[0], seqs[-1]),
            ).rowcount
        return int(deleted)

    def pending(self, after: int, limit: int, upto: int | None = None) -> list[tuple[int, str]]:
        """Pending records with ``after < seq [<= upto]``, oldest first: (seq, JSON body as
        sent)."""
        return pending_rows(self.conn, after, limit, upto, self._agent_json)

    def pending_of(self, seqs: Iterable[int]) -> list[tuple[int, str]]:
        """Those of ``seqs`` still pending, oldest first: (seq, JSON body as sent)."""
        wanted = sorted(not_stored(self.conn, seqs))
        out: list[tuple[int, str]] = []
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" * len(chunk))
            out.extend(
                (int(s), sent_body(s, k, b, p, self._agent_json))
                for s, k, b, p in self.conn.execute(
                    f"SELECT seq, kind, body, prev FROM records WHERE state = 0 AND seq IN "
                    f"({marks}) ORDER BY seq",
                    chunk,
                )
            )
        return out

    def bodies(self, first: int, last: int) -> list[tuple[int, str]]:
        """The records held with ``first <= seq <= last``, whatever their upload state, in seq
        order: (seq, JSON body as sent)."""
        return [(int(s), sent_body(s, k, b, p, self._agent_json)) for s, k, b, p in
                self.conn.execute("SELECT seq, kind, body, prev FROM records WHERE seq BETWEEN "
                                  "? AND ? ORDER BY seq", (first, last))]

    def mark(
        self,
        stored: Sequence[tuple[int, int]],
        rejected: Sequence[tuple[int, int, str]],
        conflicts: Sequence[int] = (),
        retryable: Sequence[bool] = (),
    ) -> int:
        """Record the collector's answer: stored ranges, rejected ranges with reasons (and
        whether each is retryable), conflicts; return rows changed.

        On a full disk the reserve file is given back and the answer written again.
        """
        return self.when_full(lambda: self._mark(stored, rejected, conflicts, retryable))

    def _last_hash(self) -> str:
        """The chain hash of the last record given (GENESIS before the first)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'last_hash'").fetchone()
        if row is not None:
            return str(row[0])
        # A buffer from before chaining: chain on from its last record (docs/trust.md).
        last = self.conn.execute("SELECT seq, kind, body, prev FROM records ORDER BY seq DESC "
                                 "LIMIT 1").fetchone()
        if last is None:
            return GENESIS
        try:
            seq, kind, body, prev = last
            return record_hash(orjson.loads(sent_body(seq, kind, body, prev, self._agent_json)))
        except (RecordError, orjson.JSONDecodeError):
            return GENESIS

    def hashes(self, seqs: Iterable[int]) -> dict[int, str]:
        """The chain hash of each of ``seqs`` that the buffer still holds: its own ``hash``
        (rows written whole), else the next record's ``prev``, else (the newest) the last hash
        given; else hashed from its body as the collector does (captured before chaining, or
        the record after it gone)."""
        wanted = sorted(set(seqs))
        out: dict[int, str] = {}
        newest: tuple[int, str] | None = None
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for seq, digest, after in self.conn.execute(
                f"SELECT r.seq, r.hash, n.prev FROM records r LEFT JOIN records n "
                f"ON n.seq = r.seq + 1 WHERE r.seq IN ({marks})",
                chunk,
            ):
                if digest is None:
                    digest = after
                if digest is None:
                    if newest is None:  # the last seq and its hash from ONE read: read
                        # apart, a commit between them paired a seq with a newer record's hash
                        newest = self._tail()
                    if seq == newest[0]:
                        digest = newest[1]
                if digest is None:
                    row = self.conn.execute(
                        "SELECT kind, body, prev FROM records WHERE seq = ?", (seq,)).fetchone()
                    if row is None:  # deleted since the read above (retention, eviction)
                        continue
                    kind, body, prev = row
                    try:
                        digest = record_hash(orjson.loads(
                            sent_body(seq, kind, body, prev, self._agent_json)))
                    except (RecordError, orjson.JSONDecodeError):
                        continue
                out[int(seq)] = hash_hex(digest)
        return out

    def pending_in(self, first: int, last: int) -> int:
        """How many records in seq ``first``..``last`` are pending."""
        return pending_between(self.conn, first, last)

    def checkpoint(self) -> None:
        """Copy the WAL into the database and start it over (its file's room is then reused)."""
        with contextlib.suppress(sqlite3.Error):
            self.conn.execute("PRAGMA wal_checkpoint(RESTART)")

    def when_full(self, write: Callable[[], _T]) -> _T:
        """Run ``write``; on a full disk make room and run it again, at most twice: first the
        WAL is checkpointed (its room reused), then the reserve file is given back (room for the
        checkpoint itself: the WAL's new pages must fit into the database file)."""
        try:
            return write()
        except BufferError as err:
            if not err.full:
                raise
        self.checkpoint()
        try:
            return write()
        except BufferError as err:
            if not (err.full and release_reserve(self.path)):
                raise
            log.warning("disk full: the buffer's reserve file %s given back", reserve_path(self.path))
        self.checkpoint()  # the WAL's pages now fit into the database file
        return write()

    def _mark(
        self,
        stored: Sequence[tuple[int, int]],
        rejected: Sequence[tuple[int, int, str]],
        conflicts: Sequence[int] = (),
        retryable: Sequence[bool] = (),
    ) -> int:
        with self._failing("write to"), transaction(self.conn):
            return mark_answers(self.conn, stored, rejected, conflicts, retryable, _wall_ms())

    def _tail(self) -> tuple[int, str]:
        """The last seq given and the chain hash of the last record given, in one read (the
        usual case: both kept in ``meta``)."""
        last_seq, last_hash, largest = self.conn.execute(
            "SELECT (SELECT value FROM meta WHERE key = 'last_seq'), "
            "(SELECT value FROM meta WHERE key = 'last_hash'), "
            "(SELECT COALESCE(MAX(seq), 0) FROM records)").fetchone()
        seq = max(int(last_seq) if last_seq is not None else 0, int(largest))
        return seq, str(last_hash) if last_hash is not None else self._last_hash()

    def _last_seq(self) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
        (largest,) = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM records").fetchone()
        return max(int(row[0]) if row else 0, int(largest))

    def last_seq(self) -> int:
        """The last seq given (0 before the first record), even if retention deleted it."""
        return self._last_seq()

    def expire(self, before_ms: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` records the collector stored whose ts is before ``before_ms``.

        Only ``stored`` records go: pending and rejected ones are never deleted here.
        """
        # Not marked ``full`` (unlike the other writes), as before.
        with self._failing("write to", full=False), transaction(self.conn):
            deleted = self.conn.execute(
                "DELETE FROM records WHERE seq IN (SELECT r.seq FROM records r "
                "WHERE r.ts_ms < ? AND r.state < 2 AND " + HELD.format(seq="r.seq")
                + " LIMIT ?)",
                (before_ms, limit),
            ).rowcount
        return int(deleted)

    def pending_count(self) -> int:
        """Records not yet answered by the collector (the backlog: the records after the
        stored ranges, and the few between them)."""
        return pending_between(self.conn, 1, MAX_REPLAY_SEQ)

    def counts(self) -> Counts:
        """Records per upload state and the last seq."""
        by_state = count_states(self.conn)
        return Counts(
            pending=int(by_state.get(PENDING, 0)),
            stored=int(by_state.get(STORED, 0)),
            rejected=int(by_state.get(REJECTED, 0)),
            last_seq=self.last_seq(),
            conflicts=int(by_state.get(CONFLICT, 0)),
            retryable=self.retryable_count(),
        )

    def retryable_count(self) -> int:
        """Rejected records whose cause may change (sent again by a replay)."""
        (count,) = self.conn.execute(
            "SELECT COUNT(*) FROM records WHERE state = ? AND retryable = 1", (REJECTED,)
        ).fetchone()
        return int(count)

    def replay_rejected(self, first: int = 1, last: int | None = None) -> int:
        """Make the retryable rejected records with first <= seq <= last pending again (sent
        again by the uplink, ``frota agent replay``); final rejects and conflicts stay. Counts
        ``replay_gen`` up in ``meta`` in the same transaction: a running uplink sees it and
        starts its backlog over (agent/uplink.py). Returns how many records go again."""
        upto = MAX_REPLAY_SEQ if last is None else last
        with self._failing("write to"), transaction(self.conn):
            return replay(self.conn, first, upto)

    def replay_gen(self) -> int:
        """How many replays were asked of this buffer (0: none): the uplink's cue."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'replay_gen'").fetchone()
        return 0 if row is None else int(row[0])

    def last_device_seq(self, source: str) -> int | None:
        """The ``device_seq`` captured last from ``source`` (where the registrador's catch-up starts)."""
        row = self.conn.execute(
            "SELECT device_seq FROM records WHERE source = ? AND device_seq IS NOT NULL "
            "ORDER BY seq DESC LIMIT 1",
            (source,),
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])
