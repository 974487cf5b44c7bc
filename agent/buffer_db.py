"""The buffer's database: how it is opened (WAL, durable commits, a small WAL), its upload
states and the one error it raises (:class:`BufferError`).

Durability (firmware-notes/agent.md, "Durable and fast"): SQLite in WAL mode with ``synchronous=FULL``. A
commit returns only after its WAL frames are on the disk (one ``fsync`` of the WAL per commit),
so a committed record survives a power cut, not only a crash. ``synchronous=NORMAL`` would sync
the WAL only at checkpoints: the database stays consistent, but the last commits before a power
cut may be lost — and a record the agent counted as captured (and a device frame it will never
ask for again) would be gone. The cost of FULL is one ``fsync`` per commit, so commits are
batched (``agent/writer.py``): its cost per record falls with the batch.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: WAL pages before an automatic checkpoint (SQLite's default is 1000).
WAL_PAGES: Final = 64
#: The WAL file is cut back to this after a checkpoint (bytes). Above the largest usual commit
#: (the uplink's acks mark up to 1,000 records: ~200 pages), so the file is not cut and grown
#: again at every commit: that doubled the cost of marking a batch stored (issue 16).
WAL_FILE_LIMIT: Final = 1024 * 1024

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


def is_full(err: sqlite3.Error) -> bool:
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


def connect(path: Path, max_bytes: int | None = None) -> sqlite3.Connection:
    """Open the buffer's database durable (WAL, ``synchronous=FULL``) with a small WAL, capped
    at ``max_bytes`` when given; BufferError if its folder is missing or it cannot be opened."""
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
        conn.execute(f"PRAGMA journal_size_limit={WAL_FILE_LIMIT}")
        if max_bytes is not None:
            # buffer.max_size_mb: SQLite's own cap; past it a write fails as on a full disk.
            (page,) = conn.execute("PRAGMA page_size").fetchone()
            conn.execute(f"PRAGMA max_page_count={max(1, max_bytes // int(page))}")
    except (sqlite3.Error, OSError) as err:
        raise BufferError(f"cannot open the buffer {path}: {err}") from err
    return conn
