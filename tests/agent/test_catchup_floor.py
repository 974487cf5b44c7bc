"""The registrador's catch-up floor, step by step, on a real pty and a real buffer file.

The case of a failed CI run of the SIGKILL test: a new buffer downloads frames 1–486 while live
frames 487–497 arrive; the cable is pulled after frames 1–474 of the answer (475–486 and the
history end lost), and 498–505 go by while it is out. On the new line, frames 506–515 arrive
live. On the new line the request in flight is asked again for the frames of it that did not
arrive (475–486, not the whole 1–486 again). The agent stops (cleanly) before the downloads are
done: the floor it committed with its frames must be 475, the lowest frame it does not hold, and
the next start must fetch every frame still owed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.buffer import Buffer
from agent.sources import make_source
from agent.sources.base import StateHooks
from agent.sources.registrador import RegistradorSource
from agent.timekeeper import TimeKeeper
from agent.writer import BufferWriter
from protocols.registrador.decoder import RegistradorDecoder
from protocols.registrador.encoder import encode_history_end, encode_history_record, encode_status
from protocols.registrador.frames import HISTORY_RANGE, HISTORY_REQUEST
from protocols.registrador.scanner import FrameScanner
from simulators.pty import PtyPort
from tests.agent.helpers import T0_MS, VEHICLE, wait_until
from tests.agent.test_sources import device

pytestmark = pytest.mark.pty

NAME = "registrador"


def frame(seq: int) -> bytes:
    """Status frame ``seq``, one device second after the previous one."""
    return encode_status(seq, T0_MS + seq * 1000, kmh=float(seq % 90), odometer_m=seq * 14,
                         ignition=True)


class Requests:
    """The history requests the agent wrote on the line: (request id, first, last)."""

    def __init__(self, port: PtyPort) -> None:
        self.port = port
        self.scanner = FrameScanner()
        self.seen: list[tuple[int, int, int]] = []

    def poll(self) -> list[tuple[int, int, int]]:
        """Read what the agent wrote; return every request seen so far."""
        if self.port.plugged:
            for raw in self.scanner.feed(self.port.read()):
                if raw.type == HISTORY_REQUEST:
                    asked = HISTORY_RANGE.parse(raw.payload)
                    self.seen.append((raw.seq, int(asked.first), int(asked.last)))
        return self.seen


class Agent:
    """A registrador source, the buffer writer and a reader wired as ``agent/main.py`` does."""

    def __init__(self, path: Path, tty: str) -> None:
        self.writer = BufferWriter(path, commit_interval_ms=20)
        self.reader = Buffer(path)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        source = make_source(
            device(NAME, "registrador", tty), VEHICLE, self.writer.put_many, TimeKeeper(),
            self.stop_event, last_device_seq=self.last_device_seq,
            state=StateHooks(
                save=self.writer.put_many,
                load=self.state,
                resume=lambda: self.writer.resume(NAME),
            ),
        )
        assert isinstance(source, RegistradorSource)
        source.captured_runs = self.captured_runs
        self.source = source
        self.writer.start()
        source.start()

    def last_device_seq(self) -> int | None:
        """The frame captured last (the source asks at its first frame)."""
        with self.lock:
            return self.reader.last_device_seq(NAME)

    def captured_runs(self, first: int, last: int) -> list[tuple[int, int]]:
        """The runs of frames first…last the buffer knows it captured."""
        with self.lock:
            return self.reader.captured_runs(NAME, first, last)

    def state(self) -> str | None:
        """The source's state committed with its frames (its catch-up floor)."""
        with self.lock:
            return self.reader.source_state(NAME)

    def frames(self) -> set[int]:
        """The frame numbers captured."""
        with self.lock:
            rows = self.reader.conn.execute(
                "SELECT DISTINCT device_seq FROM records WHERE source = ?", (NAME,)
            ).fetchall()
        return {int(seq) for (seq,) in rows}

    def stop(self) -> None:
        """Stop as on SIGTERM: the source, then the writer's flush."""
        self.stop_event.set()
        self.source.join(5)
        self.writer.stop()
        self.reader.close()


@pytest.fixture
def port(tmp_path: Path) -> Iterator[PtyPort]:
    """The registrador's end of the line."""
    pty = PtyPort(tmp_path / "registrador", baud=0, stall_timeout_s=10.0)
    pty.open()
    yield pty
    pty.close()


def talk(port: PtyPort, seqs: range) -> None:
    """Live frames ``seqs``, one every 20 ms (those written while the agent opens the line may
    be flushed by its open: frames it missed, as on a real line)."""
    for seq in seqs:
        port.write(frame(seq))
        time.sleep(0.02)


def answer(port: PtyPort, request_id: int, frames: range, *, end: tuple[int, int] | None) -> None:
    """History records of ``frames`` for ``request_id``, then (unless None) the history end for
    the range asked (first, last); the memory holds every frame from 1."""
    for seq in frames:
        port.write(encode_history_record(request_id, T0_MS + 600_000, frame(seq)))
    if end is not None:
        first, last = end
        sent = max(0, min(last, frames.stop - 1) - first + 1)
        port.write(encode_history_end(request_id, T0_MS + 600_000, first=first, last=last,
                                      sent=sent, oldest=1))


def test_a_stop_mid_catch_up_leaves_the_floor_at_the_first_frame_owed(
    tmp_path: Path, port: PtyPort
) -> None:
    buffer = tmp_path / "buffer.sqlite"
    agent = Agent(buffer, port.path)
    asked = Requests(port)
    try:
        # A new buffer: live frames up to 497, so the agent asks for the last hour (from 1).
        talk(port, range(487, 498))
        assert wait_until(lambda: asked.poll())
        request_id, first, last = asked.seen[0]
        assert first == 1
        assert last >= 486
        # The answer's first 474 records arrive; then the cable is pulled.
        answer(port, request_id, range(1, 475), end=None)
        assert wait_until(lambda: set(range(1, 475)) | {497} <= agent.frames())
        port.unplug()
        # 498–505 go by unheard; on the new line 506–515 arrive live.
        port.open()
        talk(port, range(506, 516))
        assert wait_until(lambda: 515 in agent.frames())
        # The request in flight is asked again for what did not arrive: its tail, not 1–486
        # (with 498–505, missed live, in the same request: closer than MERGE_GAP = 13).
        assert wait_until(lambda: len(asked.poll()) >= 2)
        assert asked.seen[1][1] == 475
        assert asked.seen[1][2] >= last
    finally:
        agent.stop()
    # What the stopped agent left in its buffer: 475–486 and 498–505 (at least) still owed.
    check = Buffer(buffer)
    try:
        frames = {int(s) for (s,) in check.conn.execute(
            "SELECT DISTINCT device_seq FROM records WHERE source = ?", (NAME,))}
        state = check.source_state(NAME)
    finally:
        check.close()
    owed = sorted(set(range(1, 516)) - frames)
    assert owed[0] == 475
    assert {*range(475, 487), *range(498, 506)} <= set(owed)
    assert state is not None
    assert json.loads(state)["floor"] == 475

    # The next start resumes from the floor: its first live frame reveals everything owed, and
    # only that is asked for, from 475 (the frames owed lie closer together than MERGE_GAP =
    # 32: one request).
    agent = Agent(buffer, port.path)
    asked = Requests(port)
    try:
        talk(port, range(516, 526))
        assert wait_until(lambda: asked.poll())
        request_id, first, last = asked.seen[0]
        assert first == 475
        assert max(owed) <= last < 526  # up to the frame before the first one heard live
        answer(port, request_id, range(first, last + 1), end=(first, last))
        assert wait_until(lambda: set(range(1, 526)) <= agent.frames())
    finally:
        agent.stop()


def test_a_full_buffer_asks_again_for_exactly_the_frames_it_dropped(tmp_path: Path) -> None:
    # Frames 1–10 delivered; the full buffer dropped 3, 4 and 7. Only those are owed: asking for
    # 3–10 again would capture 5, 6, 8–10 a second time once their first copies were uploaded
    # and evicted to make room (a CI run stored such a frame under two seqs).
    captured: list[list[dict[str, object]]] = []
    source = make_source(
        device(NAME, "registrador", str(tmp_path / "unused")), VEHICLE,
        lambda _name, records: captured.append(records), TimeKeeper(), threading.Event(),
    )
    assert isinstance(source, RegistradorSource)
    decoder = RegistradorDecoder(VEHICLE)
    by_frame = {seq: decoder.feed(frame(seq)) for seq in range(1, 11)}
    for seq in range(1, 11):
        source.deliver(by_frame[seq])
    assert source.floor() == 11  # nothing owed
    source.dropped([*by_frame[3], *by_frame[4], *by_frame[7]])
    source.deliver([])  # the source thread's next turn takes the drop into account
    assert source.floor() == 3
    assert [(w.first, w.last) for w in source._wanted] == [(3, 4), (7, 7)]
