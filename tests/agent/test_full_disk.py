"""A full buffer: on a really full filesystem (a 2 MiB tmpfs, when this test may mount one) and at
SQLite's own cap (``buffer.max_size_mb`` → ``max_page_count``). Nothing is mocked: the writer
fills the buffer until SQLite says SQLITE_FULL.

What must hold (issue 5): records not yet uploaded are never evicted; when nothing can go, the
batch is dropped and the sources are told (the registrador's frames come back by catch-up), and
a ``buffer_full`` device record is written as soon as anything can be; once the collector has
stored records, the oldest of them are evicted to make room.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.buffer import Buffer, BufferError
from agent.writer import BufferWriter
from protocols.records import Record, make_record
from tests.agent.helpers import VEHICLE, speed


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` (skips where mounting is not allowed)."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture(params=["tmpfs", "max_page_count"])
def full_path(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, int | None]]:
    """(buffer path, max_bytes) on a 2 MiB filesystem, or capped at 512 KiB by SQLite."""
    if request.param == "tmpfs":
        with tmpfs(tmp_path / "small", "2m") as folder:
            yield folder / "buffer.sqlite", None
    else:
        yield tmp_path / "buffer.sqlite", 512 * 1024


def full_record(detail: str) -> Record:
    return make_record("device", VEHICLE, "2026-03-02T14:00:00.000Z", device="agent",
                       status="buffer_full", detail=detail)


def wait_for(cond: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not callable(cond) or not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_full_buffer_keeps_pending_records_and_evicts_only_uploaded(
    full_path: tuple[Path, int | None],
) -> None:
    path, max_bytes = full_path
    writer = BufferWriter(path, commit_records=50, commit_interval_ms=5, max_bytes=max_bytes,
                          reserve_bytes=512 * 1024)
    writer.full_record = full_record
    dropped: list[tuple[str, list[Record]]] = []
    lock = threading.Lock()

    def on_drop(source: str, records: list[Record]) -> None:
        with lock:
            dropped.append((source, records))

    writer.on_drop = on_drop
    writer.start()
    n = 0
    try:
        # Nothing uploaded yet: fill until the buffer refuses (each record ~300 bytes).
        while not dropped:
            assert n < 20_000, "the buffer never filled"
            writer.put_many("reg", [speed(n, device_seq=n + 1) | {"raw": "ab" * 100}])
            n += 1
            if n % 50 == 0:
                time.sleep(0.01)
        wait_for(lambda: not writer._queue)  # the test waits for the writer
        time.sleep(0.05)
        reader = Buffer(path)
        pending = reader.pending_count()
        assert pending > 500
        assert reader.counts().stored == 0
        # Every record the writer captured is still there and pending: none was evicted.
        assert writer.captured == pending
        assert writer.evicted == 0
        assert dropped[0][0] == "reg"
        first_dropped = min(r["device_seq"] for _, recs in dropped for r in recs)
        assert first_dropped == pending + 1  # the registrador's catch-up starts here
        assert reader.conn.execute(
            "SELECT COUNT(*) FROM records WHERE body LIKE '%buffer_full%'").fetchone()[0] == 0
        # The collector stores the first half; the next records evict the oldest stored ones.
        half = pending // 2
        for first in range(1, half + 1, 100):  # acks come batch by batch
            reader.mark([(first, min(half, first + 99))], [])
        # More records: they fill the room the checkpoint and the reserve gave, then evict.
        while writer.evicted == 0:
            assert n < 40_000, "nothing was ever evicted"
            writer.put_many("reg", [speed(n, device_seq=n + 1) | {"raw": "ab" * 100}])
            n += 1
            if n % 50 == 0:
                time.sleep(0.01)
        wait_for(lambda: not writer._queue)
        time.sleep(0.05)
        (kept_pending,) = reader.conn.execute(
            "SELECT COUNT(*) FROM record_states WHERE state = 0 AND seq <= ?", (pending,)).fetchone()
        assert kept_pending == pending - half  # every record not uploaded is still there
        (oldest,) = reader.conn.execute("SELECT MIN(seq) FROM records").fetchone()
        assert 1 < oldest <= half + 1  # the oldest uploaded went first
        (body,) = reader.conn.execute(
            "SELECT body FROM records WHERE seq = ?", (pending + 1,)).fetchone()
        assert json.loads(body)["status"] == "buffer_full"  # owed, written first once possible
        reader.close()
    finally:
        writer.stop()


def test_buffer_cap_counts_as_full_even_with_disk_to_spare(tmp_path: Path) -> None:
    # 80 KiB: the schema takes a few pages of it (tables and indexes of every migration)
    buffer = Buffer(tmp_path / "b.sqlite", max_bytes=80 * 1024)
    refused: BufferError | None = None
    try:
        for n in range(2000):
            try:
                buffer.add([("reg", speed(n) | {"raw": "ab" * 200})])
            except BufferError as err:
                refused = err
                break
        assert refused is not None
        assert refused.full
        assert isinstance(refused.__cause__, sqlite3.OperationalError)
        assert buffer.counts().pending > 10
    finally:
        buffer.close()


def test_max_size_bounds_the_database_file_and_the_wal_stays_within_its_limit(
    tmp_path: Path,
) -> None:
    # agent-config.md: max_size_mb bounds the database file (SQLite's max_page_count); the WAL
    # beside it is not counted (it is said there how big it gets). 10,000 frames through a
    # 512 KiB cap, marked stored as they go so the writer evicts to make room: the file never
    # passes the cap.
    cap = 512 * 1024
    writer = BufferWriter(tmp_path / "buffer.sqlite", commit_interval_ms=20, max_bytes=cap)
    writer.start()
    db = tmp_path / "buffer.sqlite"
    peak = 0
    marker = sqlite3.connect(db, timeout=30)
    try:
        for i in range(10_000):
            writer.put_many("registrador", [speed(i + 1)])
            if i % 500 == 499:
                time.sleep(0.2)
                peak = max(peak, db.stat().st_size)
                with marker:
                    marker.execute(  # every record uploaded
                        "INSERT OR REPLACE INTO stored_ranges (first, last, acked_ms) "
                        "SELECT 1, CAST(value AS INTEGER), 0 FROM meta WHERE key = 'last_seq'")
    finally:
        marker.close()
        writer.stop()
    assert writer.evicted > 0  # the cap was reached
    assert writer.dropped == 0
    assert peak <= cap
    assert db.stat().st_size <= cap
