"""A commit larger than the buffer's room (``buffer.commit_records`` above what a small
``buffer.max_size_mb`` holds): what fits is kept, only what does not is dropped (and told to
its source). Deterministic: the writer's commit is called directly with one batch of 1,000
one-frame groups into an empty 256 KiB buffer that can hold only part of it; nothing is
uploaded, so nothing can be evicted.
"""

from __future__ import annotations

from pathlib import Path

from agent.buffer import Buffer
from agent.writer import BufferWriter, group
from protocols.records import Record
from tests.agent.helpers import speed


def test_a_batch_larger_than_the_room_keeps_what_fits_and_drops_only_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "buffer.sqlite"
    # Each record carries 200 bytes of raw frame: ~300 bytes at rest, so 1,000 of them (~300 KB)
    # cannot fit in 256 KiB, while a few hundred can.
    writer = BufferWriter(path, commit_records=1000, max_bytes=256 * 1024)
    dropped: list[Record] = []
    writer.on_drop = lambda source, records: dropped.extend(records)
    batch = [group("reg", [speed(n, device_seq=n + 1) | {"raw": "ab" * 100}])
             for n in range(1000)]
    try:
        writer._commit(batch, final=False)  # the writer thread's one commit, called here
    finally:
        writer.buffer.close()  # the thread was never started
    reader = Buffer(path)
    try:
        kept = [int(d) for (d,) in reader.conn.execute(
            "SELECT device_seq FROM records WHERE source = 'reg' ORDER BY seq")]
    finally:
        reader.close()
    lost = sorted(r["device_seq"] for r in dropped)
    assert len(kept) >= 100  # the buffer had room: some of the batch is kept
    assert len(lost) >= 1  # and 1,000 cannot all fit
    # Every frame is either in the buffer or told to its source as dropped (to be fetched
    # again), never both, never neither; what is kept is the start of the batch, in order.
    assert kept == list(range(1, len(kept) + 1))
    assert lost == list(range(len(kept) + 1, 1001))
    assert writer.captured == len(kept)
    assert writer.dropped == len(lost)
