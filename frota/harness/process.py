"""A child process with its log file, and the small waits every harness needs (ports, open files)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The repository (the children run from here, so ``python -m frota`` finds the packages).
PROJECT = Path(__file__).resolve().parent.parent.parent


class HarnessError(RuntimeError):
    """A child process died or never became ready; the message names it and its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def frota_argv(*args: str) -> list[str]:
    """The command line of a ``frota`` subcommand run by this interpreter."""
    return [sys.executable, "-m", "frota", *args]


def stop_process(proc: subprocess.Popen[Any], sig: int, timeout: float) -> int:
    """Send ``sig``, wait up to ``timeout`` seconds, then SIGKILL and wait; return the status."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def held_files(pid: int) -> set[str]:
    """The files a process has open (targets of /proc/PID/fd)."""
    held: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return held
    for fd in fds:
        try:
            held.add(os.readlink(fd))
        except OSError:
            continue
    return held


class Child:
    """One child process, its output appended to ``log``; stopped by a signal, then SIGKILL.

    ``own_group``: its own process group, so a Ctrl-C on the terminal reaches only the parent,
    which then stops its children in order (``frota demo``).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        own_group: bool = False,
        stop_timeout: float = 20.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.own_group = own_group
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the process (``env`` added to the environment)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=PROJECT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=None if env is None else {**os.environ, **env},
                process_group=0 if self.own_group else None,
            )

    @property
    def pid(self) -> int:
        """The process id (0 when not running)."""
        return 0 if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """HarnessError (with the end of its log) when the process has died."""
        if self.proc is not None and self.proc.poll() is not None:
            raise HarnessError(f"the {self.name} stopped (exit status {self.proc.returncode}); "
                               f"see {self.log}: {self.last_line()}")

    def log_text(self) -> str:
        """Everything the process wrote so far."""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def last_line(self) -> str:
        """The last non-empty line of the log (for one-line errors)."""
        lines = self.log_text().splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), "")

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int | None:
        """Send ``sig``, wait (``stop_timeout`` by default), then SIGKILL; the exit status."""
        if self.proc is None:
            return None
        status = stop_process(self.proc, sig, self.stop_timeout if timeout is None else timeout)
        self.proc = None
        return status

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye (a power cut, as far as the process can tell)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def wait_open(self, paths: Sequence[str | Path], timeout: float = 30.0) -> None:
        """Wait until the process has every one of ``paths`` open (seen in /proc)."""
        wanted = {str(Path(p).resolve()) for p in paths}
        deadline = time.monotonic() + timeout
        while not wanted <= held_files(self.pid):
            self.check()
            if time.monotonic() > deadline:
                raise HarnessError(f"the {self.name} never opened "
                                   f"{sorted(wanted - held_files(self.pid))}; see {self.log}")
            time.sleep(0.02)


def wait_port(port: int, timeout: float = 15.0, child: Child | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:port (``child`` must stay up)."""
    deadline = time.monotonic() + timeout
    while True:
        if child is not None:
            child.check()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                if child is None:
                    raise HarnessError(f"nothing listens on 127.0.0.1:{port} after {timeout} s") from None
                raise HarnessError(f"the {child.name} never listened on port {port}; "
                                   f"see {child.log}") from None
            time.sleep(0.05)
