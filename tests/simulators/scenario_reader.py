"""Reads a scenario played on ptys as the agent would: decodes the registrador and the GPS, polls the doors."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from protocols.apc.poller import Poller
from protocols.nmea import NmeaDecoder
from protocols.records import Record, ts_to_ms
from protocols.registrador.decoder import RegistradorDecoder

#: An APC frame: SYNC, ADDRESS, COMMAND, LENGTH, then LENGTH data bytes and a 2-byte CRC.
APC_HEADER, APC_CRC = 4, 2
#: Give up waiting for an answer after this long (a poll lost to the end of the play).
POLL_TIMEOUT_S = 0.2


@dataclass
class Played:
    """What the reader got from each device, and the player's exit status and stderr."""

    registrador: list[Record] = field(default_factory=list)
    gps: list[Record] = field(default_factory=list)
    apc: list[Record] = field(default_factory=list)
    polls: int = 0
    returncode: int | None = None
    stderr: str = ""


def play_and_read(scenario: Path, vehicle: str, doors: int, time_scale: float,
                  timeout_s: float = 90.0) -> Played:
    """Run ``frota sim scenario play`` and read its three ptys until it ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "frota", "sim", "scenario", "play", str(scenario),
         "--time-scale", str(time_scale), "--lead-in", "1.0", "--tail", "1.0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    out = Played()
    fds: dict[str, int] = {}
    try:
        assert proc.stdout is not None
        for _ in range(3):
            line = proc.stdout.readline()
            assert line, f"the player printed no tty path; stderr: {proc.stderr and proc.stderr.read()}"
            name, path = line.split()
            fds[name] = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        _read(fds, vehicle, doors, out, time.monotonic() + timeout_s)
        out.returncode = proc.wait(timeout=10)
    finally:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            out.stderr = proc.stderr.read()
            proc.stderr.close()
        if proc.stdout is not None:
            proc.stdout.close()
    return out


def _complete(answer: bytearray) -> bool:
    """A whole answer frame is in (a COUNTS answer is 12 bytes, an ACK_RESET answer 6)."""
    return len(answer) >= APC_HEADER and len(answer) >= APC_HEADER + answer[3] + APC_CRC


def _read(fds: dict[str, int], vehicle: str, doors: int, out: Played, deadline: float) -> None:
    registrador = RegistradorDecoder(vehicle)
    gps = NmeaDecoder(vehicle)
    poller = Poller(vehicle, list(range(1, doors + 1)))
    open_fds = dict(fds)
    latest_ms: int | None = None
    request: bytes | None = None
    sent_at = 0.0
    answer = bytearray()
    while open_fds and time.monotonic() < deadline:
        apc = open_fds.get("apc")
        if apc is not None and request is None:
            request = poller.next_request()
            answer.clear()
            sent_at = time.monotonic()
            try:
                os.write(apc, request)
                out.polls += 1
            except OSError:
                del open_fds["apc"]
                continue
        ready, _, _ = select.select(list(open_fds.values()), [], [], 0.05)
        for name in [n for n, fd in open_fds.items() if fd in ready]:
            try:
                data = os.read(open_fds[name], 65536)
            except OSError:  # EIO: the player closed the line
                data = b""
            if not data:
                del open_fds[name]
                continue
            if name == "registrador":
                records = registrador.feed(data)
                out.registrador += records
                for rec in records:
                    latest_ms = ts_to_ms(rec["ts"])
            elif name == "gps":
                out.gps += gps.feed(data)
            else:
                answer += data
        if request is not None and (_complete(answer)
                                    or time.monotonic() - sent_at > POLL_TIMEOUT_S):
            if latest_ms is not None:
                out.apc += poller.feed(request + bytes(answer), latest_ms)
            else:  # before the first registrador frame: the baseline poll, time unknown yet
                poller.decoder.set_time(0)
                out.apc += poller.feed(request + bytes(answer), 0)
            request = None
    out.registrador += registrador.finish()
    out.gps += gps.finish()
    out.apc += poller.decoder.finish()
