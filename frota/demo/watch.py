"""Live counts of the demo, read from the agent's buffer and the collector's database.

Both are SQLite files in WAL mode; each look opens a read-only connection (``mode=ro``), so it
never takes a write lock from the agent or the collector. A file not created yet, or a table not
migrated yet, counts as zero.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def query(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Rows of a read query on a SQLite file, read-only; [] when the file or table is missing."""
    if not path.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


#: What the counts of :meth:`Counts.line` are, printed once above them.
LEGEND = ("% of the trip played │ captured: decoded into the agent's buffer │ acknowledged: "
          "confirmed\nstored by the collector │ backlog: waiting for that │ stored: in the "
          "collector's database")


@dataclass(frozen=True)
class Counts:
    """One look at both ends of the path."""

    captured: int = 0       # records the agent decoded and committed to its buffer (its last seq)
    acknowledged: int = 0   # records the collector answered (stored or rejected)
    backlog: int = 0        # records in the buffer waiting for the collector's answer
    stored: int = 0         # records in the collector's database
    rejected: int = 0       # batches the collector kept in ``rejects``

    def line(self) -> str:
        """The one-line display (fits 80 columns; :data:`LEGEND` says what each count is)."""
        text = (f"captured {self.captured:>6,} │ acknowledged {self.acknowledged:>6,} │ "
                f"backlog {self.backlog:>5,} │ stored {self.stored:>6,}")
        return text + (f" │ rejects {self.rejected}" if self.rejected else "")


def look(buffer: Path, database: Path) -> Counts:
    """The counts now."""
    states = {_int(state): _int(n) for state, n in
              query(buffer, "SELECT state, COUNT(*) FROM records GROUP BY state")}
    last = query(buffer, "SELECT COALESCE(MAX(seq), 0) FROM records")
    stored = query(database, "SELECT COUNT(*) FROM records")
    rejects = query(database, "SELECT COUNT(*) FROM rejects")
    return Counts(
        captured=_int(last[0][0]) if last else 0,
        acknowledged=states.get(1, 0) + states.get(2, 0),
        backlog=states.get(0, 0),
        stored=_int(stored[0][0]) if stored else 0,
        rejected=_int(rejects[0][0]) if rejects else 0,
    )


class Display:
    """Live counts: one refreshed line on a terminal, else a line every two seconds."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.every = 0.5 if self.tty else 2.0
        self.last = 0.0
        self.open_line = False

    def show(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` if it is time to (or ``force``)."""
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        if self.tty:  # cut to the terminal's width, or the carriage return would not redraw it
            width = shutil.get_terminal_size().columns
            sys.stdout.write("\r" + text[: max(20, width - 1)] + "\x1b[K")
            self.open_line = True
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def done(self) -> None:
        """End the refreshed line."""
        if self.open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open_line = False
