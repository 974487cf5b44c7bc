"""The durable buffer: seq without gaps across reopen, dedupe by device_seq, batched commits."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from agent.buffer import MIGRATIONS, Buffer
from agent.writer import BufferWriter
from protocols.records import make_record, ts_to_ms
from tests.agent.helpers import VEHICLE, speed


def test_seq_has_no_gaps_across_reopen_and_agent_id_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite"
    buf = Buffer(path)
    agent = buf.agent
    assert buf.add([("reg", speed(n)) for n in range(3)]) == [1, 2, 3]
    buf.close()
    buf = Buffer(path)
    assert buf.agent == agent
    assert buf.add([("reg", speed(n)) for n in range(3, 5)]) == [4, 5]
    bodies = [json.loads(b) for _, b in buf.pending(0, 100)]
    assert [b["seq"] for b in bodies] == [1, 2, 3, 4, 5]
    assert {b["agent"] for b in bodies} == {agent}
    assert [b["ts"] for b in bodies] == [speed(n)["ts"] for n in range(5)]
    buf.close()


def test_a_new_buffer_gets_a_new_agent_id(tmp_path: Path) -> None:
    a = Buffer(tmp_path / "a.sqlite")
    b = Buffer(tmp_path / "b.sqlite")
    assert a.agent != b.agent
    a.close()
    b.close()


def test_wal_mode_and_named_migrations(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    buf.close()
    conn = sqlite3.connect(tmp_path / "b.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]
    assert names == [name for name, _ in MIGRATIONS]
    conn.close()
    Buffer(tmp_path / "b.sqlite").close()  # reopening applies nothing twice


def test_one_frame_may_give_several_records(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    frame = speed(1, device_seq=10)
    slot1 = make_record("driver", VEHICLE, frame["ts"], slot=1, driver="D-1", activity="drive", device_seq=10)
    slot2 = make_record("driver", VEHICLE, frame["ts"], slot=2, driver=None, activity="rest", device_seq=10)
    assert buf.add([("reg", frame), ("reg", slot1), ("reg", slot2)]) == [1, 2, 3]
    assert buf.add([("reg", slot2), ("reg", frame)]) == []  # the same frame again
    # A frame counter that restarted (a replaced registrador): same number, another time.
    assert buf.add([("reg", speed(99, device_seq=10))]) == [4]
    buf.close()


def test_the_same_frame_twice_is_one_record_and_takes_no_seq(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    assert buf.add([("reg", speed(1, device_seq=10)), ("reg", speed(2, device_seq=11))]) == [1, 2]
    # Frame 11 again (history download), a new frame 12, and a GPS record without device_seq.
    again = [("reg", speed(2, device_seq=11)), ("reg", speed(3, device_seq=12)), ("gps", speed(4))]
    assert buf.add(again) == [3, 4]
    # The same device_seq from another source is another frame.
    assert buf.add([("other", speed(2, device_seq=11))]) == [5]
    assert buf.last_device_seq("reg") == 12
    assert buf.counts().pending == 5
    buf.close()


def test_answers_mark_records_and_nothing_is_deleted(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("reg", speed(n)) for n in range(10)])
    assert buf.mark([(1, 4), (7, 7)], [(5, 5, "invalid record: kmh")]) == 6
    assert buf.mark([(1, 4)], []) == 0  # answered twice: no change
    counts = buf.counts()
    assert (counts.pending, counts.stored, counts.rejected, counts.last_seq) == (4, 5, 1, 10)
    assert [s for s, _ in buf.pending(0, 100)] == [6, 8, 9, 10]
    assert [s for s, _ in buf.pending(0, 100, upto=8)] == [6, 8]
    assert [s for s, _ in buf.pending_of([5, 6, 7, 9])] == [6, 9]
    reason = buf.conn.execute("SELECT reason FROM records WHERE seq = 5").fetchone()
    assert reason == ("invalid record: kmh",)
    buf.close()


def test_writer_batches_commits_and_flushes_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite"
    writer = BufferWriter(path, commit_records=100, commit_interval_ms=10_000)
    committed = threading.Event()
    writer.notify(committed)
    writer.start()
    for n in range(250):
        writer.put("reg", speed(n, device_seq=n))
    # 250 records with a size bound of 100 and a long time bound: two full commits happen now.
    assert committed.wait(10)
    writer.put("reg", speed(5, device_seq=5))  # a duplicate
    writer.stop()
    assert writer.captured == 250
    assert writer.duplicates == 1
    assert writer.commits == 3  # 100 + 100 by size, the rest flushed by stop
    buf = Buffer(path)
    assert buf.counts().last_seq == 250
    buf.close()


def test_writer_commits_on_time_bound(tmp_path: Path) -> None:
    writer = BufferWriter(tmp_path / "b.sqlite", commit_records=1000, commit_interval_ms=20)
    committed = threading.Event()
    writer.notify(committed)
    writer.start()
    writer.put("reg", speed(1))
    assert committed.wait(10)  # one record, far from the size bound, committed by time
    assert writer.captured == 1
    writer.stop()


def test_writer_never_splits_what_was_handed_over_together(tmp_path: Path) -> None:
    writer = BufferWriter(tmp_path / "b.sqlite", commit_records=100, commit_interval_ms=10)
    writer.start()
    # One decoder feed: 150 records of 50 frames (3 records each). Split at 100, the second
    # commit would take frame 34's last records for a repeat of the first commit's.
    group = []
    for n in range(50):
        rec = speed(n, device_seq=n)
        group += [rec, {**rec, "kind": "device", "device": "registrador", "status": "ok"}]
        group.append(make_record("driver", VEHICLE, rec["ts"], slot=1, driver=None, activity="rest", device_seq=n))
    writer.put_many("reg", group)
    writer.stop()
    assert writer.commits == 1
    assert writer.captured == 150


def test_retention_deletes_only_old_uploaded_records_and_seq_goes_on(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("reg", speed(n)) for n in range(10)])  # ts = T0 + n seconds
    buf.mark([(1, 6)], [(7, 7, "bad")])  # 1-6 stored, 7 rejected, 8-10 pending
    cutoff = ts_to_ms(speed(8)["ts"])  # records 1..8 (n = 0..7) are older than this
    assert buf.expire(cutoff, limit=4) == 4  # in chunks
    assert buf.expire(cutoff) == 2
    assert buf.expire(cutoff) == 0
    left = [s for (s,) in buf.conn.execute("SELECT seq FROM records ORDER BY seq")]
    assert left == [7, 8, 9, 10]  # the rejected one and the pending ones stay
    buf.mark([(8, 10)], [])
    assert buf.expire(ts_to_ms(speed(100)["ts"])) == 3
    buf.close()
    buf = Buffer(tmp_path / "b.sqlite")
    assert buf.last_seq() == 10
    assert buf.add([("reg", speed(11))]) == [11]  # never reused, even with the newest gone
    buf.close()


def test_frames_evicted_or_expired_are_still_known_and_never_captured_again(
    tmp_path: Path,
) -> None:
    # Issue 11: frames 1–5 and 8–9 captured, uploaded, evicted. Asked again (a catch-up after a
    # full buffer), none of them may take a new seq; frames 6–7, never captured, may.
    buf = Buffer(tmp_path / "b.sqlite")
    frames = {n: speed(n, device_seq=n) for n in range(1, 11)}
    assert buf.add([("reg", frames[n]) for n in (1, 2, 3, 4, 5, 8, 9)]) == list(range(1, 8))
    assert buf.captured_runs("reg", 1, 10) == [(1, 5), (8, 9)]
    assert buf.captured_runs("reg", 4, 8) == [(4, 5), (8, 8)]  # clipped to the range asked
    buf.mark([(1, 7)], [])
    assert buf.evict_oldest(100) == 7
    assert buf.add([("reg", frames[n]) for n in range(1, 11)]) == [8, 9, 10]  # 6, 7, 10
    assert [json.loads(b)["device_seq"] for _, b in buf.pending(0, 10)] == [6, 7, 10]
    assert buf.captured_runs("reg", 1, 10) == [(1, 10)]  # the runs merged
    # A replaced registrador numbering from 1 again, with later times: new frames.
    assert buf.add([("reg", speed(500, device_seq=3))]) == [11]
    buf.close()


def test_the_migration_fills_the_runs_from_the_records_there(tmp_path: Path) -> None:
    # A buffer made before the captured_frames table: its frames 1-3, 7 (and a record without
    # a frame number) become runs 1-3 and 7, with the device times they span.
    path = tmp_path / "b.sqlite"
    buf = Buffer(path)
    buf.add([("reg", speed(n, device_seq=n)) for n in (1, 2, 3, 7)] + [("gps", speed(20))])
    buf.conn.execute("DROP TABLE captured_frames")
    buf.conn.execute("DELETE FROM migrations WHERE name = '0005-captured-frames'")
    buf.close()
    buf = Buffer(path)
    rows = buf.conn.execute(
        "SELECT source, first, last, first_ms, last_ms FROM captured_frames ORDER BY first"
    ).fetchall()
    assert rows == [
        ("reg", 1, 3, ts_to_ms(speed(1)["ts"]), ts_to_ms(speed(3)["ts"])),
        ("reg", 7, 7, ts_to_ms(speed(7)["ts"]), ts_to_ms(speed(7)["ts"])),
    ]
    assert buf.add([("reg", speed(2, device_seq=2))]) == []
    buf.close()
