"""The buffer's one writer thread: records from every source, committed in batches bounded by
size and time (``buffer.commit_records``, ``buffer.commit_interval_ms``).

A record is captured once its commit is done; until then it is only in this queue (at most one
commit interval, 200 ms by default). A source's state (the door counters' baselines) travels
with its records and is committed in the same transaction.

What can be done for a record before its seq is known (its JSON, its canonical form with holes
for ``seq`` and ``prev``: ``agent.buffer_rows.prepare``) is done by :meth:`BufferWriter.put_many`
in the caller's thread, beside the writer's commits (whose ``fsync`` releases the GIL); the
commit only numbers, chains and inserts. The queue is a ``deque`` (its ``append`` and
``popleft`` are atomic) and an event the writer waits on only when it is empty: handing a group
over takes no lock while the writer is busy (issue 16).

A full disk (or ``buffer.max_size_mb`` reached): the oldest records the collector has stored are
evicted to make room; records not yet uploaded are never evicted. If nothing can go, the batch is
dropped — the registrador's frames come back later by catch-up, the door counters re-read their
counts from the last committed state — and a ``buffer_full`` device record is written as soon as
anything can be (firmware-notes/agent.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from operator import itemgetter
from pathlib import Path

from agent.buffer import Buffer, BufferError
from agent.buffer_rows import Ready, prepare
from agent.diskroom import ensure_reserve, reserve_path
from protocols.records import Record

log = logging.getLogger(__name__)

#: How many stored records one eviction deletes at least (a full disk frees room in steps).
EVICT_AT_LEAST = 1000
#: Stored records deleted per transaction while evicting.
EVICT_STEP = 50
#: How often the writer tries to take its reserve file back after giving it up (seconds).
RESERVE_RETRY_S = 60.0


#: Records of one source handed over together (one decoder feed), with the source's state:
#: (source, records, state, resume, ready). ``ready``: the records prepared
#: (``agent.buffer_rows.prepare``), in the same order, or None when not prepared yet (then the
#: commit prepares them). ``resume``: the source has taken back its last committed state after a
#: drop; its groups are committed again from here on. A plain tuple, not a class: one is made
#: per device frame in the source's thread and taken apart in the writer's, and a tuple costs
#: the least of both (issue 16: the hand-over was ≈ 1 µs a record with a dataclass).
Group = tuple[str, list[Record], str | None, bool, list[Ready] | None]

_records: Callable[[Group], list[Record]] = itemgetter(1)
_resume: Callable[[Group], bool] = itemgetter(3)
_ready: Callable[[Group], list[Ready] | None] = itemgetter(4)


def group(source: str, records: list[Record] | None = None, state: str | None = None,
          resume: bool = False) -> Group:
    """A group made elsewhere than :meth:`BufferWriter.put_many` (its records prepared by the
    commit)."""
    return (source, records or [], state, resume, None)


#: Called with (source, records dropped) when a full disk made a batch impossible to keep.
DropHandler = Callable[[str, list[Record]], None]


class BufferWriter:
    """The one writer thread: batches records into commits bounded by size and time.

    Records handed over together (one decoder ``feed``) stay together in one commit, so a
    device frame's records are never split (see :meth:`Buffer.add`).
    """

    def __init__(
        self,
        path: str | Path,
        commit_records: int = 1000,
        commit_interval_ms: int = 200,
        max_bytes: int | None = None,
        reserve_bytes: int = 0,
    ) -> None:
        # The reserve's size is also kept free on the disk (see Buffer.keep_free).
        self.buffer = Buffer(path, max_bytes, keep_free=reserve_bytes or None)
        self.reserve_bytes = reserve_bytes
        self._reserve_ok = ensure_reserve(self.buffer.path, reserve_bytes)
        self._reserve_tried = time.monotonic()
        self.commit_records = commit_records
        self.commit_interval_s = commit_interval_ms / 1000.0
        #: Groups handed over, oldest first (None: stop); ``_wake`` is set after an append
        #: that found it clear, and cleared by the writer just before it waits.
        self._queue: deque[Group | None] = deque()
        self._wake = threading.Event()
        self._listeners: list[threading.Event] = []
        self._thread = threading.Thread(target=self._run, name="buffer-writer", daemon=True)
        self.captured = 0
        self.duplicates = 0
        self.commits = 0
        self.dropped = 0
        self.evicted = 0
        self.error: BaseException | None = None
        #: Makes the ``buffer_full`` device record (set by the agent: it knows vehicle and clock).
        self.full_record: Callable[[str], Record] | None = None
        #: Told which records a full disk made the writer drop (set by the agent).
        self.on_drop: DropHandler | None = None
        self._owed_full: str | None = None  # the detail of a buffer_full record not yet written
        self._blocked: set[str] = set()  # sources whose stateful groups were dropped
        self._stop_asked = False  # set by stop() before its marker is queued

    @property
    def agent(self) -> str:
        """The buffer's agent id."""
        return self.buffer.agent

    @property
    def alive(self) -> bool:
        """True while the writer thread runs."""
        return self._thread.is_alive()

    def notify(self, event: threading.Event) -> None:
        """Set ``event`` after every commit that captured something."""
        self._listeners.append(event)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def _hand(self, group: Group | None) -> None:
        """Queue ``group`` (None: stop) and wake the writer if it waits."""
        self._queue.append(group)
        if not self._wake.is_set():
            self._wake.set()

    def put(self, source: str, record: Record) -> None:
        """Queue a record for the next commit (captured only once committed)."""
        self.put_many(source, [record])

    def put_many(self, source: str, records: Iterable[Record], state: str | None = None) -> None:
        """Queue records from one source that belong together (one decoder feed) and its state,
        the records prepared here, in the caller's thread."""
        recs = list(records)
        if recs or state is not None:
            agent = self.buffer.agent
            # _hand, inline: one call a device frame in a burst
            self._queue.append((source, recs, state, False, [prepare(rec, agent) for rec in recs]))
            if not self._wake.is_set():
                self._wake.set()

    def resume(self, source: str) -> None:
        """``source`` has restored its last committed state after a drop: accept its groups again."""
        self._hand(group(source, resume=True))

    def _wait(self, timeout: float | None) -> bool:
        """Wait until something is queued (at most ``timeout`` seconds); True if it is."""
        if self._queue:
            return True
        self._wake.clear()
        if self._queue:  # appended before the clear: its set may have been cleared
            return True
        return self._wake.wait(timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            while not self._queue:
                self._wait(None)
            first = self._queue.popleft()
            if first is None:
                break
            batch = [first]
            count = len(first[1])
            deadline = time.monotonic() + self.commit_interval_s
            while count < self.commit_records:
                count, stopping = self._take_queued(batch, count)
                if stopping or count >= self.commit_records:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._wait(remaining):
                    break
            self._commit_guarded(batch, final=False)
        # Flush whatever was queued behind the stop marker.
        rest = [group for group in self._drain() if group is not None]
        if rest:
            self._commit_guarded(rest, final=True)

    def _commit_guarded(self, batch: list[Group], *, final: bool) -> None:
        """:meth:`_commit`, and the thread lives on whatever it raises: a record nothing can
        store is dropped in :func:`agent.buffer_rows.build_rows`; anything else unforeseen drops
        this batch (logged, counted in ``dropped``) rather than every record after it."""
        try:
            self._commit(batch, final=final)
        except Exception as err:  # the one writer thread must not die
            self.error = err
            log.exception("buffer writer: a commit failed unexpectedly; its %d records dropped",
                          sum(map(len, map(_records, batch))))
            self._drop(batch, "commit failed")

    def _drain(self) -> list[Group | None]:
        out: list[Group | None] = []
        while self._queue:
            out.append(self._queue.popleft())
        return out

    def _take_queued(self, batch: list[Group], count: int) -> tuple[int, bool]:
        """Move the groups already queued into ``batch`` while it holds fewer than
        ``commit_records`` records, in one go (a burst queues thousands); return the records
        it holds and whether the stop marker came."""
        waiting = self._queue
        while waiting and count < self.commit_records:
            nxt = waiting.popleft()
            if nxt is None:
                return count, True
            batch.append(nxt)
            count += len(nxt[1])
        return count, False

    def _admit(self, batch: list[Group]) -> list[Group]:
        """Groups to commit: those of a source blocked since a drop are dropped until it resumes."""
        if not self._blocked and not any(map(_resume, batch)):  # the usual batch, checked in C
            return batch
        out: list[Group] = []
        for one in batch:
            if one[3]:
                self._blocked.discard(one[0])
            elif one[0] in self._blocked:
                self._drop([one])
            else:
                out.append(one)
        return out

    def _commit(self, batch: list[Group], *, final: bool) -> None:
        """Commit the batch; when a full buffer with nothing left to evict refuses it, commit
        what fits of it, group by group in order (halves, then halves of those), and drop only
        the groups that never fit: a batch larger than the buffer's room is not dropped whole
        (``buffer.commit_records`` above what a small ``max_size_mb`` holds lost records the
        buffer had room for)."""
        pieces = [self._admit(batch)]
        while pieces:
            piece = pieces.pop(0)
            outcome = self._add(piece, final=final)
            if isinstance(outcome, BufferError):  # full, nothing left to evict
                if len(piece) > 1:
                    half = len(piece) // 2
                    pieces[:0] = [piece[:half], piece[half:]]
                    continue
                # Not even one group fits: the rest of the batch would not fit either.
                self._full([g for part in (piece, *pieces) for g in part], str(outcome))
                return
            if not outcome:  # another error: kept in memory (or lost at stop)
                if not final:
                    again = [g for part in (piece, *pieces) for g in part]
                    if self._stop_asked:  # behind the stop marker: committed once more, final
                        self._queue.extend(again)
                    else:
                        # back at the head, in their order: ahead of the groups handed over
                        # since (behind them, a source's records lost their order and its
                        # older state was saved over the newer one)
                        self._queue.extendleft(reversed(again))
                    time.sleep(1.0)
                return

    def _add(self, batch: list[Group], *, final: bool) -> bool | BufferError:
        """One commit of ``batch`` (evicting uploaded records while the buffer is full): True
        when committed, the error when full with nothing left to evict, False on another error."""
        agent = self.buffer.agent
        if None in map(_ready, batch):  # not handed over by put_many: prepared here
            batch = [g if g[4] is not None else (*g[:4], [prepare(rec, agent) for rec in g[1]])
                     for g in batch]
        items = [(g[0], ready) for g in batch for ready in g[4]]  # type: ignore[union-attr]
        states = {g[0]: g[2] for g in batch if g[2] is not None}
        owed = self._owed_full
        if owed is not None and self.full_record is not None:
            items.insert(0, ("agent", prepare(self.full_record(owed), agent)))
        if not items and not states:
            return True
        while True:
            try:
                seqs = self.buffer.add_ready(items, states)
                break
            except BufferError as err:
                self.error = err
                if err.full:
                    if self._evict():
                        continue
                    return err
                log.error("%s (%d records kept in memory%s)", err, len(items),
                          "" if not final else "; lost at stop")
                return False
        if owed is not None:
            self._owed_full = None
        if not reserve_path(self.buffer.path).exists():
            self._reserve_ok = False
        if not self._reserve_ok and time.monotonic() - self._reserve_tried > RESERVE_RETRY_S:
            self._reserve_tried = time.monotonic()
            self._reserve_ok = ensure_reserve(self.buffer.path, self.reserve_bytes)
        self.error = None
        self.commits += 1
        self.captured += len(seqs)
        self.duplicates += len(items) - len(seqs)
        if seqs:
            for event in self._listeners:
                event.set()
        return True

    def _evict(self) -> bool:
        """Delete the oldest stored records to make room; False if there is none to delete."""
        deleted = 0
        try:
            # A really full disk: even a DELETE needs room in the WAL (checkpoint, reserve),
            # so records go in small transactions.
            while deleted < EVICT_AT_LEAST:
                step = self.buffer.when_full(lambda: self.buffer.evict_oldest(EVICT_STEP))
                deleted += step
                if step < EVICT_STEP:
                    break
        except BufferError as err:
            log.error("%s", err)
        if deleted:
            self.evicted += deleted
            log.warning("buffer full: %d of the oldest uploaded records evicted", deleted)
        return deleted > 0

    def _full(self, batch: list[Group], reason: str) -> None:
        """Nothing can be evicted: drop the batch, and owe a ``buffer_full`` record."""
        if self._owed_full is None:
            self._owed_full = (
                f"buffer full and nothing uploaded to evict ({reason}); records dropped, "
                "the registrador's to be fetched again by catch-up"
            )
        self._drop(batch)

    def _drop(self, batch: list[Group], why: str = "buffer full") -> None:
        for source, records, state, resume, _ in batch:
            if resume:
                self._blocked.discard(source)
                continue
            self.dropped += len(records)
            if state is not None:
                self._blocked.add(source)
            if self.on_drop is not None and (records or state is not None):
                self.on_drop(source, records)
        log.error("%s: %d records dropped so far", why, self.dropped)

    def stop(self, timeout: float = 30.0) -> None:
        """Flush the queue into the buffer and stop the thread."""
        self._stop_asked = True
        self._hand(None)
        self._thread.join(timeout)
        self.buffer.close()
