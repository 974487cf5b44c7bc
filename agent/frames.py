"""The device frames the buffer has captured, as runs of frame numbers (``captured_frames``).

A run is ``(source, first, last, first_ms, last_ms)``: frames ``first``…``last`` of one source,
captured, whose device times span ``first_ms``…``last_ms``. The runs outlive the records (they
are kept when the records are evicted or expire), so a frame asked again after its records left
the buffer is still known and never captured twice (issue 11).

One commit reads the runs it can touch once (:class:`FrameRuns`), checks and extends them in
memory as its frames go by, and writes back only the runs that changed — a few statements per
commit instead of four per frame (issue 16: the buffer's write speed).
"""

from __future__ import annotations

import sqlite3

#: One run: [first, last, first_ms, last_ms] (a list: extended in place).
Run = list[int]


class FrameRuns:
    """The runs of captured frames one commit may touch, read once and written back once.

    ``window``: per source, the lowest and highest frame number the commit holds; the runs read
    are those reaching into that window or ending or starting next to it (all a frame of the
    commit can fall in or join). Exactly what checking and merging run by run in SQL gives.
    """

    def __init__(self, conn: sqlite3.Connection, window: dict[str, tuple[int, int]]) -> None:
        self.conn = conn
        self.runs: dict[str, dict[int, Run]] = {}
        self._dirty: set[tuple[str, int]] = set()
        for source, (low, high) in window.items():
            rows = conn.execute(
                "SELECT first, last, first_ms, last_ms FROM captured_frames "
                "WHERE source = ? AND last >= ? AND first <= ?",
                (source, low - 1, high + 1),
            ).fetchall()
            self.runs[source] = {int(a): [int(a), int(b), int(c), int(d)] for a, b, c, d in rows}

    def known(self, source: str, number: int, ts_ms: int) -> bool:
        """Captured before: a run holds its number and its device time (a replaced device
        numbering from 1 again has later times than the runs of the old one: its frames are
        new)."""
        runs = self.runs.get(source)
        if runs:
            for first, last, low, high in runs.values():
                if first <= number <= last and low <= ts_ms <= high:
                    return True
        return False

    def note(self, source: str, number: int, ts_ms: int) -> None:
        """Add a frame just captured, merging it with the runs it touches."""
        self.note_span(source, number, number, ts_ms, ts_ms)

    def overlaps(self, source: str, first: int, last: int) -> bool:
        """A run of ``source`` holds some number of ``first``…``last``."""
        return any(run[0] <= last and run[1] >= first
                   for run in self.runs.get(source, {}).values())

    def note_span(self, source: str, first: int, last: int, low: int, high: int) -> None:
        """Add frames ``first``…``last`` just captured (device times ``low``…``high``), merging
        them with the run ending just before ``first`` and the one starting just after
        ``last``. One frame (:meth:`note`), or frames counting up that no run holds
        (:meth:`overlaps`): then the same runs as noting them one by one, in order (each is
        new, and joins only those two runs)."""
        runs = self.runs.setdefault(source, {})
        before = None
        for run in runs.values():  # the first run ending just before it
            if run[1] == first - 1:
                before = run
                break
        after = runs.get(last + 1)
        if before is not None:
            first, low, high = before[0], min(low, before[2]), max(high, before[3])
        if after is not None:
            last, low, high = after[1], min(low, after[2]), max(high, after[3])
            del runs[after[0]]
            self._dirty.add((source, after[0]))
        runs[first] = [first, last, low, high]
        self._dirty.add((source, first))

    def save(self) -> None:
        """Write the runs that changed (in the caller's transaction)."""
        for source, first in sorted(self._dirty):
            run = self.runs[source].get(first)
            if run is None:
                self.conn.execute("DELETE FROM captured_frames WHERE source = ? AND first = ?",
                                  (source, first))
            else:
                self.conn.execute(
                    "INSERT OR REPLACE INTO captured_frames (source, first, last, first_ms, "
                    "last_ms) VALUES (?, ?, ?, ?, ?)", (source, *run))
        self._dirty.clear()
