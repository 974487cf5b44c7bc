"""The simulated serial port shared by threads: a device's thread writes while another unplugs
and replugs it (the race that killed a test device's thread with EBADF under load)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from simulators.pty import PtyPort

FRAME = b"\xaa\x55" + bytes(range(40))


def test_writes_while_unplugged_and_replugged_never_raise(tmp_path: Path) -> None:
    port = PtyPort(tmp_path / "line", baud=0, stall_timeout_s=0.01)
    port.open()
    errors: list[BaseException] = []
    done = threading.Event()

    def device() -> None:
        try:
            while not done.is_set():
                port.write(FRAME)
        except Exception as err:  # noqa: BLE001 — what the test is about: nothing escapes
            errors.append(err)

    writer = threading.Thread(target=device)
    writer.start()
    try:
        for _ in range(200):
            port.unplug()
            port.open()
    finally:
        done.set()
        writer.join(10)
        port.close()
    assert not writer.is_alive()
    assert errors == []
    assert port.opens == 201


def test_a_write_after_unplug_sends_nothing_and_a_replug_gets_whole_frames(tmp_path: Path) -> None:
    port = PtyPort(tmp_path / "line", baud=0)
    port.open()
    port.unplug()
    assert port.write(FRAME) == 0  # the cable is out: lost
    port.open()
    reader = os.open(port.path, os.O_RDONLY | os.O_NOCTTY)
    try:
        assert port.write(FRAME) == len(FRAME)
        assert os.read(reader, 4096) == FRAME
    finally:
        os.close(reader)
        port.close()
