"""A commit whose frames count up by one with no run holding them is taken in one step
(``FrameRuns.note_span``); the runs and the records kept are those of the frame-by-frame path."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import buffer_rows
from agent.buffer import Buffer
from agent.frames import FrameRuns
from protocols.fields import ts_to_ms
from tests.agent.helpers import speed

Runs = list[tuple[str, int, int, int, int]]


def _ms(n: int) -> int:
    return ts_to_ms(speed(n)["ts"])


def _runs(buf: Buffer) -> Runs:
    return [tuple(row) for row in buf.conn.execute(
        "SELECT source, first, last, first_ms, last_ms FROM captured_frames "
        "ORDER BY source, first")]


def _frame_by_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(conn: object, items: list[tuple[str, buffer_rows.Ready]]
             ) -> tuple[FrameRuns, list[int]]:
        numbers: dict[str, list[int]] = {}
        for source, ready in items:
            if ready[2] is not None:
                numbers.setdefault(source, []).append(ready[2])
        runs = FrameRuns(conn,  # type: ignore[arg-type]
                         {s: (min(got), max(got)) for s, got in numbers.items()})
        return runs, buffer_rows._new_records(runs, items)
    monkeypatch.setattr(buffer_rows, "_frames_kept", slow)


def test_frames_joining_the_runs_before_and_after(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs 1–5 and 10–12 captured; frames 6–9 arrive (with a GPS record between): one run
    1–12, its times from frame 1's to frame 12's, and every record kept — in one step."""
    def not_frame_by_frame(*_: object) -> None:
        raise AssertionError("taken frame by frame")
    monkeypatch.setattr(buffer_rows, "_new_records", not_frame_by_frame)
    buf = Buffer(tmp_path / "b.sqlite")
    buf.conn.execute("INSERT INTO captured_frames VALUES ('reg', 1, 5, ?, ?), "
                     "('reg', 10, 12, ?, ?)", (_ms(1), _ms(5), _ms(10), _ms(12)))
    items = [("reg", speed(6, device_seq=6)), ("reg", speed(7, device_seq=7)),
             ("gps", speed(7)), ("reg", speed(8, device_seq=8)), ("reg", speed(9, device_seq=9))]
    assert buf.add(items) == [1, 2, 3, 4, 5]
    assert _runs(buf) == [("reg", 1, 12, _ms(1), _ms(12))]
    buf.close()


def test_a_frame_inside_a_run_goes_frame_by_frame(tmp_path: Path) -> None:
    """Frames 4–7 with 1–5 captured: 4 and 5 are known (left out), 6 and 7 join the run."""
    buf = Buffer(tmp_path / "b.sqlite")
    buf.conn.execute("INSERT INTO captured_frames VALUES ('reg', 1, 5, ?, ?)", (_ms(1), _ms(5)))
    assert buf.add([("reg", speed(n, device_seq=n)) for n in range(4, 8)]) == [1, 2]
    assert _runs(buf) == [("reg", 1, 7, _ms(1), _ms(7))]
    buf.close()


_commit = st.lists(st.tuples(st.sampled_from(["reg", "apc", "gps"]),
                             st.integers(min_value=1, max_value=14), st.booleans()),
                   min_size=1, max_size=12)
_before = st.lists(st.tuples(st.sampled_from(["reg", "apc"]), st.integers(1, 14),
                             st.integers(0, 4)), max_size=3)


@settings(max_examples=150, deadline=None)
@given(before=_before, commits=st.lists(_commit, min_size=1, max_size=3))
def test_same_runs_and_records_as_frame_by_frame(
        tmp_path_factory: pytest.TempPathFactory, before: list[tuple[str, int, int]],
        commits: list[list[tuple[str, int, bool]]]) -> None:
    """Any runs captured before (overlapping ones too: a device numbering again) and any
    commits (numbers counting up, repeated, out of order, several sources, records without
    a frame number): the same seqs and runs both ways."""
    results = []
    for way in ("as shipped", "frame by frame"):
        with pytest.MonkeyPatch.context() as mp:
            if way == "frame by frame":
                _frame_by_frame(mp)
            buf = Buffer(tmp_path_factory.mktemp("b") / "b.sqlite")
            for source, first, length in before:
                buf.conn.execute("INSERT OR REPLACE INTO captured_frames VALUES (?, ?, ?, ?, ?)",
                                 (source, first, first + length, _ms(first),
                                  _ms(first + length)))
            seqs = [buf.add([(source, speed(n, device_seq=n if framed else None))
                             for source, n, framed in commit]) for commit in commits]
            results.append((seqs, _runs(buf)))
            buf.close()
    assert results[0] == results[1]
