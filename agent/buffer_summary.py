"""A read-only look into the agent's buffer, for ``frota agent status`` and ``frota demo``.

The buffer's tables belong to :mod:`agent.buffer` (their layout to :mod:`agent.schema`); readers
outside the agent's process ask this module instead of writing their own SQL. The file is opened
read-only (``mode=ro``): in WAL mode the running agent keeps writing, and a look never takes its
write lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from agent.buffer import CONFLICT, PENDING, REJECTED, STORED, BufferError, Counts
from agent.upload_states import count_states, pending_rows

#: How many of the newest records are scanned for each source's latest one (then one query each).
RECENT: Final = 5000


@dataclass(frozen=True)
class DeviceReport:
    """The newest ``device`` record of one device (registrador, gps, apc, agent)."""

    status: str | None
    ts: str | None
    detail: str | None
    captured_ms: int


@dataclass(frozen=True)
class BufferSummary:
    """What the buffer says about the agent: counts, backlog age, last answer, device health."""

    agent: str | None
    counts: Counts
    oldest_pending_ts_ms: int | None
    last_ack_ms: int | None
    #: Per configured source name: host time its newest record was captured (ms), or None.
    last_captured_ms: dict[str, int | None] = field(default_factory=dict)
    #: Per ``device`` value: its newest ``device`` record.
    devices: dict[str, DeviceReport] = field(default_factory=dict)


class BufferReader:
    """A read-only connection to a buffer file; BufferError when it is missing or not a buffer."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise BufferError(f"no buffer at {self.path} (has the agent run with this configuration?)")
        try:
            self.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
        except sqlite3.Error as err:
            raise BufferError(f"cannot read the buffer {self.path}: {err}") from err
        try:
            self._rows("SELECT value FROM meta WHERE key = 'agent'")
        except BufferError:
            self.conn.close()
            raise

    def __enter__(self) -> BufferReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as err:
            raise BufferError(f"cannot read the buffer {self.path}: {err}") from err

    def counts(self) -> Counts:
        """Records per upload state and the last seq given."""
        try:
            by_state = count_states(self.conn)
        except sqlite3.Error as err:
            raise BufferError(f"cannot read the buffer {self.path}: {err}") from err
        meta = self._rows("SELECT value FROM meta WHERE key = 'last_seq'")
        (largest,) = self._rows("SELECT COALESCE(MAX(seq), 0) FROM records")[0]
        return Counts(
            pending=int(by_state.get(PENDING, 0)),
            stored=int(by_state.get(STORED, 0)),
            rejected=int(by_state.get(REJECTED, 0)),
            last_seq=max(int(meta[0][0]) if meta else 0, int(largest)),
            conflicts=int(by_state.get(CONFLICT, 0)),
            retryable=int(self._rows("SELECT COUNT(*) FROM records WHERE state = ? "
                                     "AND retryable = 1", (REJECTED,))[0][0]),
        )

    def agent(self) -> str | None:
        """The agent id the buffer was made with."""
        rows = self._rows("SELECT value FROM meta WHERE key = 'agent'")
        return str(rows[0][0]) if rows else None

    def summary(self, sources: Iterable[str]) -> BufferSummary:
        """Everything ``frota agent status`` shows, for the configured ``sources``."""
        try:
            first = pending_rows(self.conn, 0, 1, None, '""')  # only its seq is read
        except sqlite3.Error as err:
            raise BufferError(f"cannot read the buffer {self.path}: {err}") from err
        oldest = self._rows("SELECT ts_ms FROM records WHERE seq = ?", (first[0][0],)) if first else []
        (acked,) = self._rows("SELECT MAX(acked_ms) FROM (SELECT MAX(acked_ms) AS acked_ms "
                              "FROM records UNION ALL SELECT MAX(acked_ms) FROM stored_ranges)")[0]
        return BufferSummary(
            agent=self.agent(),
            counts=self.counts(),
            oldest_pending_ts_ms=int(oldest[0][0]) if oldest else None,
            last_ack_ms=None if acked is None else int(acked),
            last_captured_ms=self.last_captured(list(sources)),
            devices=self.latest_device_records(),
        )

    def last_captured(self, sources: list[str]) -> dict[str, int | None]:
        """Per source, the host time its newest record was captured (ms), or None."""
        recent = dict(
            self._rows(
                "SELECT source, MAX(captured_ms) FROM (SELECT source, captured_ms FROM records "
                "ORDER BY seq DESC LIMIT ?) GROUP BY source",
                (RECENT,),
            )
        )
        out: dict[str, int | None] = {}
        for source in sources:
            if source in recent:
                out[source] = int(recent[source])
                continue
            row = self._rows(
                "SELECT captured_ms FROM records WHERE source = ? ORDER BY seq DESC LIMIT 1",
                (source,),
            )
            out[source] = int(row[0][0]) if row else None
        return out

    def latest_device_records(self) -> dict[str, DeviceReport]:
        """The newest ``device`` record per ``device`` value (registrador, gps, apc, agent)."""
        rows = self._rows(
            "SELECT json_extract(body, '$.device'), json_extract(body, '$.status'), "
            "json_extract(body, '$.ts'), json_extract(body, '$.detail'), captured_ms FROM records "
            "WHERE seq IN (SELECT MAX(seq) FROM records WHERE kind = 'device' "
            "GROUP BY json_extract(body, '$.device'))"
        )
        return {
            str(device): DeviceReport(status, ts, detail, int(captured))
            for device, status, ts, detail, captured in rows
        }


def look(path: str | Path) -> Counts:
    """The buffer's counts now; all zero when it does not exist or is not migrated yet."""
    try:
        with BufferReader(path) as reader:
            return reader.counts()
    except BufferError:
        return Counts(pending=0, stored=0, rejected=0, last_seq=0)
