"""The buffer's one writer thread: records from every source, committed in batches bounded by
size and time (``buffer.commit_records``, ``buffer.commit_interval_ms``).

A record is captured once its commit is done; until then it is only in this queue (at most one
commit interval, 200 ms by default).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from agent.buffer import Buffer, BufferError
from protocols.records import Record

log = logging.getLogger(__name__)


class BufferWriter:
    """The one writer thread: batches records into commits bounded by size and time.

    Records handed over together (one decoder ``feed``) stay together in one commit, so a
    device frame's records are never split (see :meth:`Buffer.add`).
    """

    def __init__(self, path: str | Path, commit_records: int = 200, commit_interval_ms: int = 200):
        self.buffer = Buffer(path)
        self.commit_records = commit_records
        self.commit_interval_s = commit_interval_ms / 1000.0
        self._queue: queue.Queue[list[tuple[str, Record]] | None] = queue.Queue()
        self._listeners: list[threading.Event] = []
        self._thread = threading.Thread(target=self._run, name="buffer-writer", daemon=True)
        self.captured = 0
        self.duplicates = 0
        self.commits = 0
        self.error: BaseException | None = None

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

    def put(self, source: str, record: Record) -> None:
        """Queue a record for the next commit (captured only once committed)."""
        self._queue.put([(source, record)])

    def put_many(self, source: str, records: Iterable[Record]) -> None:
        """Queue records from one source that belong together (one decoder feed)."""
        group = [(source, rec) for rec in records]
        if group:
            self._queue.put(group)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch = list(first)
            deadline = time.monotonic() + self.commit_interval_s
            while len(batch) < self.commit_records:
                remaining = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.extend(nxt)
            self._commit(batch, final=False)
        # Flush whatever was queued behind the stop marker.
        rest: list[tuple[str, Record]] = []
        while True:
            try:
                group = self._queue.get_nowait()
            except queue.Empty:
                break
            if group is not None:
                rest.extend(group)
        if rest:
            self._commit(rest, final=True)

    def _commit(self, batch: list[tuple[str, Record]], *, final: bool) -> None:
        try:
            seqs = self.buffer.add(batch)
        except BufferError as err:
            self.error = err
            log.error("%s (%d records kept in memory%s)", err, len(batch), "" if not final else "; lost at stop")
            if not final:
                # Keep the records and retry on the next round rather than drop them.
                self._queue.put(batch)
                time.sleep(1.0)
            return
        self.error = None
        self.commits += 1
        self.captured += len(seqs)
        self.duplicates += len(batch) - len(seqs)
        if seqs:
            for event in self._listeners:
                event.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Flush the queue into the buffer and stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)
        self.buffer.close()
