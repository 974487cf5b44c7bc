"""The bound on the payload bytes kept in the store's ``rejects`` table (``database.rejects_max_mb``).

A flood of garbage (up to 1 MiB a payload) must not fill the server's disk, and nothing may be
lost silently: past the bound the payloads of the OLDEST rejects are emptied, each row keeping its
reason and metadata and, in ``dropped_bytes``, how many payload bytes it had. Payloads are dropped
in ``id`` order, so the dropped rows are the ones up to ``floor_id``; the tally of kept and dropped
bytes is counted once when the store opens and kept up to date after every commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

log = logging.getLogger(__name__)

#: Rows read at a time while looking for the oldest payloads to drop.
PAGE: Final = 1000

Query = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
Execute = Callable[[str, Sequence[tuple[Any, ...]]], int]


@dataclass(frozen=True)
class RejectsTally:
    """The ``rejects`` payload bytes kept and dropped."""

    #: Payload bytes kept in ``rejects``.
    kept_bytes: int = 0
    #: The newest row whose payload was dropped (payloads are dropped oldest first).
    floor_id: int = 0
    #: Rows whose payload was dropped, and how many payload bytes that was.
    dropped: int = 0
    dropped_bytes: int = 0


def load_tally(query: Query) -> RejectsTally:
    """Count the kept and dropped payload bytes of ``rejects`` (``query``: a read-only query)."""
    kept, floor, dropped, dropped_bytes = query(
        "SELECT coalesce(sum(length(payload)), 0), "
        "coalesce(max(CASE WHEN dropped_bytes > 0 THEN id END), 0), "
        "coalesce(sum(CASE WHEN dropped_bytes > 0 THEN 1 ELSE 0 END), 0), "
        "coalesce(sum(dropped_bytes), 0) FROM rejects",
        (),
    )[0]
    return RejectsTally(int(kept), int(floor), int(dropped), int(dropped_bytes))


def drop_oldest_payloads(
    query: Query, execute: Execute, tally: RejectsTally, bound: int
) -> RejectsTally:
    """Inside the caller's transaction (``query`` and ``execute`` run in it): empty the payloads
    of the oldest rejects until at most ``bound`` payload bytes are kept; the new tally."""
    excess, freed, dropped, cutoff = tally.kept_bytes - bound, 0, 0, tally.floor_id
    while freed < excess:
        page = query(
            "SELECT id, length(payload) FROM rejects WHERE id > ? ORDER BY id LIMIT ?",
            (cutoff, PAGE),
        )
        if not page:
            break
        for row_id, size in page:
            cutoff, freed, dropped = int(row_id), freed + int(size), dropped + (int(size) > 0)
            if freed >= excess:
                break
    # The right-hand sides read the row as it was: dropped_bytes gets the payload's old length.
    execute(
        "UPDATE rejects SET dropped_bytes = length(payload), payload = ? WHERE id > ? AND id <= ?",
        [(b"", tally.floor_id, cutoff)],
    )
    log.warning(
        "rejects: payloads of the %d oldest reject(s) dropped (%d bytes) to keep at most %d "
        "payload bytes (database.rejects_max_mb); their rows and reasons are kept",
        dropped,
        freed,
        bound,
    )
    return RejectsTally(
        tally.kept_bytes - freed, cutoff, tally.dropped + dropped, tally.dropped_bytes + freed
    )
