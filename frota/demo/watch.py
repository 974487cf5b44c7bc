"""Live counts of the demo, read from the agent's buffer and the collector's database.

Each look asks the owners of the tables (:mod:`agent.buffer_summary`, the collector store's
summaries) through read-only connections, so it never takes a write lock from the agent or the
collector. A file not created yet, or a table not migrated yet, counts as zero.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agent import buffer_summary
from collector.store import StoreError, open_store
from collector.store_summary import StoreTotals


def _store_totals(database: Path) -> StoreTotals:
    """The collector's totals now; zero when the database is not there or not migrated yet."""
    try:
        store = open_store(str(database), read_only=True)
    except StoreError:
        return StoreTotals(records=0, rejects=0, last_received_ms=None)
    try:
        return store.totals()
    except StoreError:
        return StoreTotals(records=0, rejects=0, last_received_ms=None)
    finally:
        store.close()


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
    agent = buffer_summary.look(buffer)
    collector = _store_totals(database)
    return Counts(
        captured=agent.last_seq,
        acknowledged=agent.stored + agent.rejected,
        backlog=agent.pending,
        stored=collector.records,
        rejected=collector.rejects,
    )


def last_received_ms(database: Path) -> int | None:
    """When the collector received its newest record (its clock), or None."""
    return _store_totals(database).last_received_ms


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
