"""The durable buffer on the Pi: SQLite in WAL mode, records numbered 1, 2, 3, … with no gaps.

A record is *captured* once its transaction commits. ``seq`` is assigned inside the committing
transaction (the next number after the last one given, kept in ``meta``), so a crash or SIGKILL
can never leave a gap or reuse a number. A device frame already captured (received live and
again by a history download) is skipped whole. Nothing is deleted before the collector confirms
it: each record carries its upload state (pending, stored, rejected with the collector's reason);
only stored records are deleted: past the retention, or the oldest first on a full disk.

One :class:`Buffer` (one sqlite3 connection) per thread: WAL lets the uplink read while the
writer (``agent/writer.py``) commits. The schema and its named migrations are in
``agent/schema.py``, the disk's reserve in ``agent/diskroom.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson

from agent import hostclock
from agent.diskroom import release_reserve, reserve_path
from agent.schema import MIGRATIONS as MIGRATIONS  # re-exported: the tests check the names
from agent.schema import migrate, transaction
from protocols.chain import GENESIS, record_hash
from protocols.records import Record, RecordError, device_key, ts_to_ms

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: WAL pages before an automatic checkpoint (SQLite's default is 1000).
WAL_PAGES: Final = 64

PENDING: Final = 0
STORED: Final = 1
REJECTED: Final = 2
#: The largest seq a replay range may name (2**63 - 1, SQLite's INTEGER).
MAX_REPLAY_SEQ: Final = (1 << 63) - 1
#: The collector holds a different record under this identity: kept apart, never sent again.
CONFLICT: Final = 3

class BufferError(RuntimeError):
    """The buffer's database cannot be opened, migrated or written (``full``: no space left)."""

    def __init__(self, message: str, *, full: bool = False) -> None:
        super().__init__(message)
        self.full = full


def _is_full(err: sqlite3.Error) -> bool:
    """SQLITE_FULL: the disk is full, or the database reached ``max_page_count``."""
    return getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


@dataclass(frozen=True)
class Counts:
    """How many records the buffer holds in each upload state."""

    pending: int
    stored: int
    rejected: int
    last_seq: int
    #: Records the collector holds another version of (kept apart, never sent again).
    conflicts: int = 0
    #: Of ``rejected``, those refused for a cause that may change (an unknown vehicle, a newer
    #: schema): never evicted, sent again by ``frota agent replay`` (firmware-notes/agent.md).
    retryable: int = 0


def _wall_ms() -> int:
    # Diagnostics only (when a record was captured or acknowledged); never a record's ts.
    return hostclock.wall_ms()


def _connect(path: Path, max_bytes: int | None = None) -> sqlite3.Connection:
    if not path.parent.is_dir():
        # Never made: a mistyped path would put the records where nobody looks for them.
        raise BufferError(
            f"cannot open the buffer {path}: no directory {str(path.parent)!r} (create it first)"
        )
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed record survives a power cut, not only a crash (issue 5).
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        # A small WAL, checkpointed often: on a really full disk the pages it holds must still
        # fit into the database file (firmware-notes/agent.md, "A full disk").
        conn.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit={WAL_PAGES * 4096 * 2}")
        if max_bytes is not None:
            # buffer.max_size_mb: SQLite's own cap; past it a write fails as on a full disk.
            (page,) = conn.execute("PRAGMA page_size").fetchone()
            conn.execute(f"PRAGMA max_page_count={max(1, max_bytes // int(page))}")
    except (sqlite3.Error, OSError) as err:
        raise BufferError(f"cannot open the buffer {path}: {err}") from err
    return conn


def _body(rec: Record, agent: str, seq: int, prev: str) -> tuple[str, str]:
    """The record as stored and sent — common fields first, then agent, seq and ``prev`` (the
    chain hash of the record before it), then the rest — and its own chain hash."""
    out: dict[str, Any] = {"vehicle": rec["vehicle"], "ts": rec["ts"], "kind": rec["kind"]}
    out["agent"] = agent
    out["seq"] = seq
    out["prev"] = prev
    for key, value in rec.items():
        if key not in out:
            out[key] = value
    # orjson: the same compact UTF-8 JSON as records.dumps, several times faster on the Pi.
    return orjson.dumps(out).decode(), record_hash(out)


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
        self.conn = _connect(self.path, max_bytes)
        try:
            migrate(self.conn)
            self.agent = self._agent_id()
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
                f"cannot {doing} the buffer {self.path}: {err}", full=full and _is_full(err)
            ) from err

    def _known_frame(self, source: str, device_seq: int, ts_ms: int) -> bool:
        """Captured before: its records are here, or its number and time fall within a run of
        frames captured (kept after the records are evicted or expire)."""
        row = self.conn.execute(
            "SELECT 1 FROM records WHERE source = ? AND device_seq = ? AND ts_ms = ? LIMIT 1",
            (source, device_seq, ts_ms),
        ).fetchone()
        if row is not None:
            return True
        # The run with the highest first number at or below it; a replaced device numbering
        # from 1 again has later times than the runs of the old one, so its frames are new.
        row = self.conn.execute(
            "SELECT 1 FROM captured_frames WHERE source = ? AND first <= ? AND last >= ? "
            "AND first_ms <= ? AND last_ms >= ? LIMIT 1",
            (source, device_seq, device_seq, ts_ms, ts_ms),
        ).fetchone()
        return row is not None

    def _note_frame(self, source: str, device_seq: int, ts_ms: int) -> None:
        """Add a frame just captured to the runs of captured frames (merging neighbours)."""
        conn = self.conn
        before = conn.execute(
            "SELECT first, first_ms, last_ms FROM captured_frames WHERE source = ? AND last = ?",
            (source, device_seq - 1),
        ).fetchone()
        after = conn.execute(
            "SELECT last, first_ms, last_ms FROM captured_frames WHERE source = ? AND first = ?",
            (source, device_seq + 1),
        ).fetchone()
        first, last, lo, hi = device_seq, device_seq, ts_ms, ts_ms
        if before is not None:
            first, lo, hi = int(before[0]), min(lo, int(before[1])), max(hi, int(before[2]))
        if after is not None:
            last, lo, hi = int(after[0]), min(lo, int(after[1])), max(hi, int(after[2]))
            conn.execute("DELETE FROM captured_frames WHERE source = ? AND first = ?",
                         (source, device_seq + 1))
        conn.execute(
            "INSERT OR REPLACE INTO captured_frames (source, first, last, first_ms, last_ms) "
            "VALUES (?, ?, ?, ?, ?)",
            (source, first, last, lo, hi),
        )

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
        if not items and not states:
            return []
        now = _wall_ms()
        seqs: list[int] = []
        with self._failing("write to"):
            self._limit_growth()
            with transaction(self.conn):
                seq = self._last_seq() + 1
                prev = self._last_hash()
                frame: tuple[str, int, int] | None = None
                repeat = new_frame = False
                for source, rec in items:
                    ts_ms = ts_to_ms(rec["ts"])
                    device_seq = rec.get("device_seq")
                    if device_seq is None:
                        frame, repeat = None, False
                    elif frame != (source, device_seq, ts_ms):
                        frame = (source, device_seq, ts_ms)
                        repeat = self._known_frame(source, device_seq, ts_ms)
                        new_frame = not repeat
                    if repeat:
                        continue
                    try:
                        body, digest = _body(rec, self.agent, seq, prev)
                    except RecordError as err:  # no canonical form: it cannot be chained
                        log.error("record dropped, it cannot be chained: %s", err)
                        continue
                    if device_seq is not None and new_frame:
                        self._note_frame(source, device_seq, ts_ms)
                        new_frame = False
                    cur = self.conn.execute(
                        "INSERT OR IGNORE INTO records (seq, ts_ms, kind, source, device_seq, "
                        "device_key, body, captured_ms, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            seq,
                            ts_ms,
                            rec["kind"],
                            source,
                            device_seq,
                            device_key(rec, ts_ms),
                            body,
                            now,
                            digest,
                        ),
                    )
                    if cur.rowcount == 1:
                        seqs.append(seq)
                        seq += 1
                        prev = digest
                if seqs:
                    self.conn.execute(
                        "UPDATE meta SET value = ? WHERE key = 'last_seq'", (str(seqs[-1]),)
                    )
                    self.conn.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_hash', ?)", (prev,)
                    )
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
        page = int(self.conn.execute("PRAGMA page_size").fetchone()[0])
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
            deleted = self.conn.execute(
                "DELETE FROM records WHERE seq IN (SELECT seq FROM records "
                "WHERE state = 1 ORDER BY seq LIMIT ?)",
                (limit,),
            ).rowcount
        return int(deleted)

    def pending(self, after: int, limit: int, upto: int | None = None) -> list[tuple[int, str]]:
        """Pending records with ``after < seq [<= upto]``, oldest first: (seq, JSON body)."""
        if upto is None:
            rows = self.conn.execute(
                "SELECT seq, body FROM records WHERE state = 0 AND seq > ? ORDER BY seq LIMIT ?",
                (after, limit),
            ).fetchall()
        else:
            rows = self.conn.execute(
                "SELECT seq, body FROM records WHERE state = 0 AND seq > ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (after, upto, limit),
            ).fetchall()
        return [(int(s), str(b)) for s, b in rows]

    def pending_of(self, seqs: Iterable[int]) -> list[tuple[int, str]]:
        """Those of ``seqs`` still pending, oldest first: (seq, JSON body)."""
        wanted = sorted(set(seqs))
        out: list[tuple[int, str]] = []
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" * len(chunk))
            out.extend(
                (int(s), str(b))
                for s, b in self.conn.execute(
                    f"SELECT seq, body FROM records WHERE state = 0 AND seq IN ({marks}) "
                    "ORDER BY seq",
                    chunk,
                )
            )
        return out

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
        last = self.conn.execute("SELECT body FROM records ORDER BY seq DESC LIMIT 1").fetchone()
        if last is None:
            return GENESIS
        try:
            return record_hash(orjson.loads(last[0]))
        except (RecordError, orjson.JSONDecodeError):
            return GENESIS

    def hashes(self, seqs: Iterable[int]) -> dict[int, str]:
        """The chain hash of each of ``seqs`` that the buffer still holds."""
        wanted = sorted(set(seqs))
        out: dict[int, str] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for seq, digest, body in self.conn.execute(
                f"SELECT seq, hash, CASE WHEN hash IS NULL THEN body END FROM records "
                f"WHERE seq IN ({marks})",
                chunk,
            ):
                if digest is None:  # captured before chaining: hashed as the collector does
                    try:
                        digest = record_hash(orjson.loads(body))
                    except (RecordError, orjson.JSONDecodeError):
                        continue
                out[int(seq)] = str(digest)
        return out

    def pending_in(self, first: int, last: int) -> int:
        """How many records in seq ``first``..``last`` are pending."""
        (count,) = self.conn.execute(
            "SELECT COUNT(*) FROM records WHERE state = 0 AND seq BETWEEN ? AND ?", (first, last)
        ).fetchone()
        return int(count)

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
        now = _wall_ms()
        changed = 0
        with self._failing("write to"), transaction(self.conn):
            for seq in conflicts:
                changed += self.conn.execute(
                    "UPDATE records SET state = 3, acked_ms = ? WHERE seq = ? AND state = 0",
                    (now, seq),
                ).rowcount
            for first, last in stored:
                changed += self.conn.execute(
                    "UPDATE records SET state = 1, acked_ms = ? "
                    "WHERE seq BETWEEN ? AND ? AND state = 0",
                    (now, first, last),
                ).rowcount
            for i, (first, last, reason) in enumerate(rejected):
                again = int(bool(retryable[i])) if i < len(retryable) else 0
                changed += self.conn.execute(
                    "UPDATE records SET state = 2, reason = ?, retryable = ?, acked_ms = ? "
                    "WHERE seq BETWEEN ? AND ? AND state = 0",
                    (reason, again, now, first, last),
                ).rowcount
        return changed

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
                "DELETE FROM records WHERE seq IN (SELECT seq FROM records "
                "WHERE ts_ms < ? AND state = 1 LIMIT ?)",
                (before_ms, limit),
            ).rowcount
        return int(deleted)

    def pending_count(self) -> int:
        """Records not yet answered by the collector (the backlog; cheap: a partial index)."""
        (count,) = self.conn.execute("SELECT COUNT(*) FROM records WHERE state = 0").fetchone()
        return int(count)

    def counts(self) -> Counts:
        """Records per upload state and the last seq."""
        by_state = dict(
            self.conn.execute("SELECT state, COUNT(*) FROM records GROUP BY state").fetchall()
        )
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
            changed = int(self.conn.execute(
                "UPDATE records SET state = ?, reason = NULL, retryable = 0, acked_ms = NULL "
                "WHERE state = ? AND retryable = 1 AND seq BETWEEN ? AND ?",
                (PENDING, REJECTED, first, upto),
            ).rowcount)
            if changed:
                self.conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('replay_gen', '1') ON CONFLICT (key) "
                    "DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)")
        return changed

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
