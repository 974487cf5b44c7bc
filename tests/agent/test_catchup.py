"""The registrador's catch-up: frames the agent missed (not yet started, stopped, cable out) are
downloaded by history request from the simulator's memory, with their original frame numbers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sources import make_source
from agent.sources.registrador import RegistradorSource
from agent.timekeeper import TimeKeeper
from tests.agent.helpers import VEHICLE, wait_until
from tests.agent.test_sources import Collected, device
from tests.services import PROJECT

pytestmark = pytest.mark.pty


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``frota sim registrador`` at 20× (20 frames a second), unpaced; (tty link, sent log)."""
    link, sent = tmp_path / "registrador", tmp_path / "sent.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "frota", "sim", "registrador", "--link", str(link), "--baud", "0",
         "--time-scale", "20", "--start", "2026-03-02T14:00:00Z", "--sent-log", str(sent)],
        cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(link.exists)
        yield link, sent
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)


def sent_frames(log: Path) -> list[int]:
    """Frame numbers the simulator sent live (history answers have string labels)."""
    out = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if isinstance(entry["label"], int):
            out.append(entry["label"])
    return out


def test_missed_frames_are_downloaded(simulator: tuple[Path, Path]) -> None:
    link, sent = simulator
    sink = Collected()
    captured: list[int] = []

    def last() -> int | None:
        return max(captured) if captured else None

    def run_source(seconds: float) -> int:
        stop = threading.Event()
        source = make_source(
            device("registrador", "registrador", str(link)), VEHICLE, sink, TimeKeeper(), stop,
            last_device_seq=last,
        )
        source.start()
        time.sleep(seconds)
        stop.set()
        source.join(5)
        with sink.lock:
            captured.extend(r["device_seq"] for _, r in sink.items if "device_seq" in r)
        assert isinstance(source, RegistradorSource)
        return source.frames_requested

    time.sleep(0.5)  # ~10 frames before the agent's first start: a new Pi fetches them
    assert run_source(2.0) > 0
    # the agent is down while the simulator sends 20 frames live (counted in its log, not by
    # the clock: a loaded machine may send fewer in a second)
    down_after = last()
    assert down_after is not None
    assert wait_until(lambda: sum(1 for seq in sent_frames(sent) if seq > down_after) >= 20)
    assert run_source(2.0) >= 20
    with sink.lock:
        got = {r["device_seq"] for _, r in sink.items if "device_seq" in r}
    highest = max(got)
    expected = [seq for seq in sent_frames(sent) if seq <= highest]
    assert len(expected) > 60
    assert sorted(set(expected) - got) == []
