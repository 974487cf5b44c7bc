"""The buffer's read-only summaries (agent/buffer_summary.py): what `frota agent status` and
`frota demo` read instead of their own SQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.buffer import Buffer, BufferError, Counts
from agent.buffer_summary import BufferReader, look
from protocols.records import make_record
from tests.agent.helpers import VEHICLE, speed


def test_counts_and_summary_of_a_buffer(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite"
    buf = Buffer(path)
    seqs = buf.add([("reg", speed(n)) for n in range(6)])
    assert seqs == [1, 2, 3, 4, 5, 6]
    gps_down = make_record("device", VEHICLE, "2026-03-02T14:20:00.000Z", device="gps",
                           status="disconnected", detail="line gone")
    gps_up = make_record("device", VEHICLE, "2026-03-02T14:21:00.000Z", device="gps", status="ok")
    assert buf.add([("gps", gps_down)]) == [7]
    assert buf.add([("gps", gps_up)]) == [8]
    buf.mark([(1, 3)], [(4, 4, "bad")])  # 3 stored, 1 rejected, 4 pending (5, 6, 7, 8)
    agent = buf.agent
    buf.close()

    with BufferReader(path) as reader:
        assert reader.counts() == Counts(pending=4, stored=3, rejected=1, last_seq=8)
        summary = reader.summary(["reg", "gps", "doors"])
    assert summary.agent == agent
    assert summary.oldest_pending_ts_ms is not None  # seq 5: speed(4)
    assert summary.last_ack_ms is not None
    assert summary.last_captured_ms["doors"] is None
    assert summary.last_captured_ms["reg"] is not None
    gps = summary.devices["gps"]
    assert (gps.status, gps.ts, gps.detail) == ("ok", "2026-03-02T14:21:00.000Z", None)


def test_a_missing_buffer_is_one_error_and_zero_counts_for_the_demo(tmp_path: Path) -> None:
    with pytest.raises(BufferError, match="no buffer at"):
        BufferReader(tmp_path / "none.sqlite")
    assert look(tmp_path / "none.sqlite") == Counts(pending=0, stored=0, rejected=0, last_seq=0)
    not_a_buffer = tmp_path / "other.sqlite"
    not_a_buffer.write_bytes(b"")  # an empty file: SQLite opens it, but it has no tables
    with pytest.raises(BufferError, match="cannot read the buffer"):
        BufferReader(not_a_buffer)


def test_the_reader_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite"
    Buffer(path).close()
    before = path.stat().st_mtime_ns, path.stat().st_size
    with BufferReader(path) as reader, pytest.raises(Exception, match="readonly"):
        reader.conn.execute("DELETE FROM records")
    assert (path.stat().st_mtime_ns, path.stat().st_size) == before
