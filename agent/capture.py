"""``frota agent capture``: a device's raw bytes with their times, as ``frota decode --hex`` reads.

The running agent holds its serial ports (opened with ``flock``), so a capture goes through it:
the agent listens on a Unix socket beside its buffer (``<buffer>.capture.sock``); a client asks
for one device and a number of seconds, and the agent tees that device's bytes to it — what the
device sent and, for the door counters, the agent's polls (the decoder needs both) — as lines
``<RFC 3339 time> <hex bytes>``, stamped with the time keeper's time as the records are. With no
agent running, the capture runs the device's source itself for those seconds (the same polls and
line settings), and a port some other process holds is refused: it never fights for the port.

The socket speaks one JSON line each way, then capture lines until the time is up::

    → {"device": "doors", "seconds": 60}
    ← {"ok": true, "device": "doors", "protocol": "apc", "port": "/dev/frota/apc"}
    ← 2026-03-02T14:23:05.021Z 01 03 ...

(Hand-rolled over ``socket``: a line protocol on one local socket needs no framework.)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import serial

from agent.config import AgentConfig, DeviceConfig
from agent.sources.base import Source, Tap
from agent.timekeeper import TimeKeeper
from protocols.records import Record, ms_to_ts

log = logging.getLogger(__name__)

#: The agent's capture socket is the buffer's path with this suffix.
SOCKET_SUFFIX = ".capture.sock"
#: The longest capture (seconds).
MAX_SECONDS = 3600.0
#: Chunks waiting for a slow reader before new ones are dropped (and counted): a source never waits.
QUEUE_CHUNKS = 10_000
#: How long the agent waits for a client's request line (seconds).
REQUEST_TIMEOUT_S = 5.0
#: A capture without an agent counts its seconds from the device's first word (or first report):
#: opening may take a while (an SLCAN adapter is given 2 s after opening). At most this long.
OPEN_GRACE_S = 15.0


class CaptureError(Exception):
    """A capture that cannot be made; the message says why, in one line."""


def socket_path(buffer: Path) -> Path:
    """Where the agent with this buffer listens for capture requests."""
    return buffer.with_name(buffer.name + SOCKET_SUFFIX)


def capture_line(ts_ms: int, data: bytes) -> str:
    """One line of a capture: the time of the bytes, then the bytes in hex."""
    return f"{ms_to_ts(ts_ms)} {data.hex(' ')}\n"


class CaptureServer:
    """The agent's side: a Unix socket; each client gets one device's bytes for some seconds."""

    def __init__(self, path: Path, sources: dict[str, Source]) -> None:
        self.path = path
        self.sources = sources
        self._sock: socket.socket | None = None
        self._closed = threading.Event()
        self._taps_lock = threading.Lock()

    def start(self) -> bool:
        """Listen (a stale socket file of a killed agent is replaced); False if it cannot."""
        try:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(self.path.lstat().st_mode):
                    self.path.unlink()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # bound and listening under a name of its own, then renamed into place: once the
            # path exists a client's connect is accepted (between bind and listen it was
            # refused, and `frota agent capture` took the starting agent for none)
            staging = self.path.with_name(f".capture-{os.getpid()}")
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()
            try:
                sock.bind(str(staging))
                os.chmod(staging, 0o660)
                sock.listen(4)
                os.replace(staging, self.path)
            except OSError:
                sock.close()
                with contextlib.suppress(OSError):
                    staging.unlink()
                raise
            sock.settimeout(0.5)
        except OSError as err:
            log.warning("capture socket %s unavailable (%s): frota agent capture cannot reach "
                        "this agent", self.path, err)
            return False
        self._sock = sock
        threading.Thread(target=self._accept, name="capture", daemon=True).start()
        return True

    def close(self) -> None:
        """Stop listening and remove the socket file; captures in progress end."""
        self._closed.set()
        if self._sock is not None:
            self._sock.close()
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="capture-client",
                             daemon=True).start()

    def _request(self, conn: socket.socket) -> tuple[Source, float]:
        conn.settimeout(REQUEST_TIMEOUT_S)
        data = b""
        while not data.endswith(b"\n") and len(data) < 1024:
            chunk = conn.recv(1024)
            if not chunk:
                break
            data += chunk
        try:
            request = json.loads(data)
            name, seconds = str(request["device"]), float(request["seconds"])
        except (ValueError, KeyError, TypeError) as err:
            raise CaptureError("bad request: expected {\"device\": NAME, \"seconds\": N}") from err
        source = self.sources.get(name)
        if source is None:
            raise CaptureError(f"no device {name!r} in this agent (it has: "
                               f"{', '.join(sorted(self.sources)) or 'none'})")
        if not 0 < seconds <= MAX_SECONDS:
            raise CaptureError(f"seconds: {seconds:g} is not in (0, {MAX_SECONDS:g}]")
        return source, seconds

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                source, seconds = self._request(conn)
            except (CaptureError, OSError) as err:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"ok": False, "error": str(err)}).encode() + b"\n")
                return
            chunks: queue.Queue[tuple[int, bytes]] = queue.Queue(QUEUE_CHUNKS)
            dropped = 0

            def tap(ts_ms: int, data: bytes) -> None:
                nonlocal dropped
                try:
                    chunks.put_nowait((ts_ms, data))
                except queue.Full:
                    dropped += 1

            header = {"ok": True, "device": source.name, "protocol": source.config.protocol,
                      "port": source.config.port}
            log.info("capture of %s for %g s started", source.name, seconds)
            self._add(source, tap)
            try:
                conn.sendall(json.dumps(header).encode() + b"\n")
                deadline = time.monotonic() + seconds
                while not self._closed.is_set() and (left := deadline - time.monotonic()) > 0:
                    try:
                        ts_ms, data = chunks.get(timeout=min(0.2, left))
                    except queue.Empty:
                        continue
                    conn.sendall(capture_line(ts_ms, data).encode())
                self._remove(source, tap)
                while True:  # what was teed before the tap came off
                    try:
                        ts_ms, data = chunks.get_nowait()
                    except queue.Empty:
                        break
                    conn.sendall(capture_line(ts_ms, data).encode())
                if dropped:
                    conn.sendall(f"# {dropped} chunks dropped: the reader was too slow\n".encode())
            except OSError as err:
                log.info("capture of %s ended early: %s", source.name, err)
            finally:
                self._remove(source, tap)
                log.info("capture of %s ended", source.name)

    def _add(self, source: Source, tap: Tap) -> None:
        with self._taps_lock:
            source.taps = (*source.taps, tap)

    def _remove(self, source: Source, tap: Tap) -> None:
        with self._taps_lock:
            source.taps = tuple(t for t in source.taps if t is not tap)


def through_agent(
    path: Path, device: str, seconds: float, write: Callable[[str], None]
) -> dict[str, Any] | None:
    """Capture through the running agent listening at ``path``; None if no agent listens.

    ``write`` gets each capture line. Returns the agent's header (device, protocol, port).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        except OSError as err:
            raise CaptureError(f"cannot reach the agent at {path}: {err.strerror}") from err
        sock.sendall(json.dumps({"device": device, "seconds": seconds}).encode() + b"\n")
        sock.settimeout(seconds + 30)  # the agent ends the stream when the time is up
        reader = sock.makefile("rb")
        try:
            first = reader.readline()
            try:
                header = json.loads(first)
            except ValueError:
                raise CaptureError(f"the agent at {path} gave no answer") from None
            if not header.get("ok"):
                raise CaptureError(str(header.get("error", "refused by the agent")))
            for raw in reader:
                write(raw.decode("ascii", errors="replace"))
        except TimeoutError as err:
            raise CaptureError(f"the agent at {path} stopped answering") from err
        return dict(header)


def standalone(
    config: AgentConfig, device: DeviceConfig, seconds: float, write: Callable[[str], None]
) -> None:
    """No agent is running: run the device's source here for ``seconds`` and tee its bytes.

    The records it makes are not kept (that is the agent's job); the port is opened with the
    agent's settings, and refused if another process holds it.
    """
    from agent.sources import make_source

    def discard(source: str, records: list[Record]) -> None:
        """Records are not kept by a capture."""

    stop = threading.Event()
    source = make_source(device, config.vehicle, discard, TimeKeeper(), stop)
    try:
        source.open().close()  # the port is there and nobody holds it
    except (serial.SerialException, OSError, ValueError) as err:
        raise CaptureError(f"cannot open {device.port}: {err}") from err
    lock = threading.Lock()

    def tap(ts_ms: int, data: bytes) -> None:
        with lock:
            write(capture_line(ts_ms, data))

    source.taps = (tap,)
    source.start()
    try:
        opening = time.monotonic() + OPEN_GRACE_S
        while source.health is None and time.monotonic() < opening:
            stop.wait(0.05)
        stop.wait(seconds)
    finally:
        stop.set()
        source.join(10)
