"""Stored as ranges (migration 0007): the collector's acks kept as seq ranges, not per record."""

from __future__ import annotations

import json
from pathlib import Path

from agent.buffer import Buffer
from tests.agent.helpers import speed


def _states(buf: Buffer) -> dict[int, int]:
    return dict(buf.conn.execute("SELECT seq, state FROM record_states").fetchall())


def _ranges(buf: Buffer) -> list[tuple[int, int]]:
    return buf.conn.execute("SELECT first, last FROM stored_ranges ORDER BY first").fetchall()


def test_an_old_buffer_keeps_every_record_and_its_state(tmp_path: Path) -> None:
    # A buffer of 0006: each record's state in its row. Seqs 1-3 stored, 4 rejected, 5-6
    # stored, 7-8 deleted (stored, expired), 9 stored, 10 a conflict, 11-12 pending.
    path = tmp_path / "b.sqlite"
    buf = Buffer(path)
    assert buf.add([("reg", speed(n)) for n in range(12)]) == list(range(1, 13))
    conn = buf.conn
    conn.execute("DROP VIEW record_states")
    conn.execute("DROP TABLE stored_ranges")
    conn.execute("DROP INDEX records_answered")
    conn.execute("CREATE INDEX records_pending ON records (seq) WHERE state = 0")
    conn.execute("DELETE FROM migrations WHERE name = '0007-stored-ranges'")
    conn.execute("UPDATE records SET state = 1, acked_ms = 5 WHERE seq IN (1, 2, 3, 5, 6, 9)")
    conn.execute("UPDATE records SET state = 2, reason = 'bad', retryable = 1 WHERE seq = 4")
    conn.execute("UPDATE records SET state = 3 WHERE seq = 10")
    conn.execute("DELETE FROM records WHERE seq IN (7, 8)")
    buf.close()

    buf = Buffer(path)
    assert _states(buf) == {1: 1, 2: 1, 3: 1, 4: 2, 5: 1, 6: 1, 9: 1, 10: 3, 11: 0, 12: 0}
    assert _ranges(buf) == [(1, 3), (5, 9)]  # islands of rows; 7-8 were stored, then deleted
    counts = buf.counts()
    assert (counts.pending, counts.stored, counts.rejected, counts.conflicts,
            counts.retryable, counts.last_seq) == (2, 6, 1, 1, 1, 12)
    assert [s for s, _ in buf.pending(0, 100)] == [11, 12]
    assert buf.pending_count() == 2
    # The rejected record made pending again is not stored by the range around it.
    assert buf.replay_rejected() == 1
    assert [s for s, _ in buf.pending(0, 100)] == [4, 11, 12]
    assert buf.mark([(1, 12)], []) == 3  # 4, 11, 12; the conflict stays
    assert _states(buf)[10] == 3
    assert buf.pending_count() == 0
    assert buf.evict_oldest(100) == 9  # every stored record, never the conflict
    assert [s for (s,) in buf.conn.execute("SELECT seq FROM records")] == [10]
    buf.close()


def test_acks_out_of_order_and_twice_merge_into_one_range(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("reg", speed(n)) for n in range(10)])
    assert buf.mark([(7, 8)], []) == 2
    assert buf.mark([(1, 3)], []) == 3
    assert [s for s, _ in buf.pending(0, 100)] == [4, 5, 6, 9, 10]
    assert [s for s, _ in buf.pending(3, 2)] == [4, 5]  # the limit holds across gaps
    assert [s for s, _ in buf.pending(0, 100, upto=8)] == [4, 5, 6]
    assert buf.pending_in(2, 9) == 4
    assert [s for s, _ in buf.pending_of([1, 4, 8, 9])] == [4, 9]
    assert buf.mark([(1, 8)], []) == 3  # 4-6
    assert buf.mark([(1, 8)], []) == 0  # answered twice: no change
    assert _ranges(buf) == [(1, 8)]
    assert buf.mark([(9, 10)], []) == 2
    assert _ranges(buf) == [(1, 10)]
    buf.close()


def test_a_stored_range_never_holds_a_rejected_record_nor_a_seq_not_given(
    tmp_path: Path,
) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("reg", speed(n)) for n in range(6)])
    assert buf.mark([], [(3, 3, "unknown vehicle")], retryable=[True]) == 1
    assert buf.mark([(1, 1_000)], []) == 5  # 1-2, 4-6; nothing beyond seq 6
    assert _ranges(buf) == [(1, 2), (4, 6)]
    assert buf.mark([], [(5, 5, "late reject")]) == 0  # stored already: no change
    assert buf.add([("reg", speed(n)) for n in range(6, 8)]) == [7, 8]
    assert [s for s, _ in buf.pending(0, 100)] == [7, 8]  # new records are pending
    assert buf.replay_rejected() == 1
    assert _states(buf) == {1: 1, 2: 1, 3: 0, 4: 1, 5: 1, 6: 1, 7: 0, 8: 0}
    assert [json.loads(b)["seq"] for _, b in buf.pending(0, 100)] == [3, 7, 8]
    buf.close()
