"""Batch readers: the ingest's decoding and checking of batches in other processes.

Reading a batch (:func:`collector.intake.prepare`: decompress, decode, check every record, its
canonical form and chain hash) is Python work that holds the interpreter's lock; committing it
is mostly SQLite's or PostgreSQL's, which gives the lock up. In one process the two take turns
on one core, and each row's commit waited for the lock while a batch was being read (issue 16:
the drain ran at the sum of both). With ``ingest.readers`` processes the batches are read beside
the commits, on the other cores.

A :class:`BatchReaders` is a :class:`concurrent.futures.ProcessPoolExecutor` (the standard
library's; processes started by a *forkserver*, never forked from the collector's threads) that
runs :func:`read_batch`. Whether the topic's vehicle is in the registry is decided in the
collector (:class:`Known`: only that answer crosses to the reader, not the registry). The
ingest keeps each message's place in its queue, so batches are committed and answered in the
order they arrived, as without readers.

Reader processes end with the collector, however it ends (:func:`watch_parent`). A reader
process that dies (killed, out of memory, a crash in a C library on a hostile payload)
breaks the pool: every batch it held comes back as :class:`BrokenProcessPool`. The ingest then
starts a new pool and reads each of those batches once more (:meth:`BatchReaders.result`),
alone, in a process of its own (another pool, one batch at a time: a batch that only happened
to be in a pool another payload killed is never taken for the killer); a batch whose second
reading also kills its process is rejected whole (``the batch reader died reading it``), so
one payload can neither stop the ingest nor be read forever.

A reader that does not answer stops the ingest as surely as one that dies: the batches are
committed in arrival order, so the worker waits for each. A batch not read within
``ingest.read_limit_s`` (30 s by default; a batch at the protocol's largest is read in well
under a second) has its pool's processes killed — which the batches it held then take for a
death, as above — and is read once more alone under the same limit; a batch that runs out of
time there too is rejected whole (``the batch reader took more than N s reading it``).

Reader processes that cannot be started at all (the system refuses a new process: fork's
``EAGAIN`` under a process limit, or memory) would leave every batch unread: the batches are
then read in the collector's own process, as with ``ingest.readers = 0``, an error is logged,
and the processes are tried again a minute later.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import forkserver
from types import FrameType

from collector.intake import Prepared, prepare, reject_payload
from protocols.uplink import vehicle_of_topic

log = logging.getLogger(__name__)

__all__ = ["BatchReaders", "Known", "Reading", "read_batch"]

#: The reason given for a payload whose reading killed the reader process twice.
DIED_READING = "the batch reader died reading it"
#: Seconds a batch may take to be read (``ingest.read_limit_s``' default).
READ_LIMIT_S = 30.0
#: Seconds the batches are read in the collector's process after the reader processes could
#: not be started, before they are tried again.
RETRY_START_S = 60.0


#: What ``ProcessPoolExecutor.submit`` raises when it cannot take a batch: the pool broken
#: (``BrokenProcessPool``) or shut down (``RuntimeError``), or a process it starts for it that
#: cannot be (``RuntimeError`` from multiprocessing's checks, ``OSError`` from fork or the
#: forkserver's socket, ``EOFError`` from a forkserver gone).
_CANNOT_SUBMIT = (RuntimeError, OSError, EOFError)


def took_too_long(limit_s: float) -> str:
    """The reason given for a payload that was not read within ``limit_s``, twice."""
    return f"the batch reader took more than {limit_s:g} s reading it"


@dataclass(frozen=True)
class Known:
    """The registry's answer for one message's vehicle, as :func:`prepare` asks it: the
    vehicle itself when the registry knows it, else nothing (picklable, a few bytes)."""

    vehicles: frozenset[str]

    def __call__(self) -> frozenset[str]:
        return self.vehicles

    @classmethod
    def of(cls, topic: str, registry: frozenset[str]) -> Known:
        """The answer for ``topic``'s vehicle from the whole ``registry``."""
        vehicle = vehicle_of_topic(topic)
        return cls(frozenset({vehicle}) if vehicle is not None and vehicle in registry
                   else frozenset())


def read_batch(topic: str, payload: bytes, known: Known, received_ms: int,
               max_payload_bytes: int) -> Prepared:
    """What a reader process runs: :func:`collector.intake.prepare` (never raises)."""
    return prepare(topic, payload, known, received_ms, max_payload_bytes)


@dataclass(frozen=True)
class Reading:
    """A batch submitted to a reader: its future, the pool that has it, what it was given."""

    future: Future[Prepared]
    pool: ProcessPoolExecutor
    args: tuple[str, bytes, Known, int, int]


#: What a reader process runs on one batch (:func:`read_batch`'s signature).
Read = Callable[[str, bytes, Known, int, int], Prepared]


def _imported_by_the_forkserver() -> bool:
    """True in the readers' forkserver importing this module (its preload, :meth:`BatchReaders.
    _start`): :func:`multiprocessing.forkserver.main` is among the callers."""
    main = forkserver.main.__code__
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is main:
            return True
        frame = frame.f_back
    return False


def reader_started(pid: int, level: int = logging.WARNING, fmt: str | None = None) -> None:
    """Each reader process's start: SIGINT and SIGTERM ignored, the collector (``pid``)
    watched, and its log lines written as the collector writes its own (``level`` and ``fmt``:
    the collector's root logger's when the pool started; a reader logs to the stderr it shares
    with the collector, e.g. the unexpected errors reading a payload).

    A Ctrl-C on the terminal reaches the whole process group, and stopping a systemd unit
    sends SIGTERM to every process of it: a reader that died of either broke its pool while
    the collector was still committing its queued batches (each read again, an error logged).
    The collector stops its readers when it has finished with them (:meth:`BatchReaders.close`)
    and they end with it however it ends (:func:`watch_parent`); SIGKILL still ends one. Their
    forkserver ignores both too (the end of this module)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=level, format=fmt or logging.BASIC_FORMAT, stream=sys.stderr,
                        force=True)
    watch_parent(pid)


def watch_parent(pid: int) -> None:
    """In each reader process: exit as soon as the collector (``pid``) is gone.

    A reader waits for work on a queue whose pipe it holds both ends of, so it would never see
    a collector killed with SIGKILL (or by the kernel's out-of-memory killer) go: readers and
    their forkserver, which lives as long as one of them does, would be left running for good.
    A thread waits on the collector's pid file descriptor (Linux 5.3+, readable once the process
    has ended; without one, ``kill(pid, 0)`` every second) and ends this process."""

    def wait() -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd: poll
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    pass
                time.sleep(1.0)
        else:
            select.select([fd], [], [])
        os._exit(0)

    threading.Thread(target=wait, name="collector-watch", daemon=True).start()


def _warm() -> int:
    # busy for a moment: the pool starts a process for each submitted call that finds none idle,
    # so ``count`` of these submitted at once start ``count`` processes
    time.sleep(0.05)
    return os.getpid()


class BatchReaders:
    """``count`` reader processes; batches submitted in any thread, results as futures."""

    def __init__(self, count: int, read: Read = read_batch,
                 read_limit_s: float = READ_LIMIT_S) -> None:
        """``read``: what each process runs on a batch (a module-level function, found by
        name in the reader process; tests give one that dies on a payload of theirs).
        ``read_limit_s``: how long a batch may take to be read (see the module's docstring)."""
        if count < 1:
            raise ValueError("BatchReaders needs at least one process")
        if not read_limit_s > 0:
            raise ValueError("BatchReaders needs a positive read_limit_s")
        self.count = count
        self.read_limit_s = read_limit_s
        self._read_fn = read
        #: Until when (monotonic seconds) batches are read in this process, the reader
        #: processes having failed to start; 0: not.
        self._in_process_until = 0.0
        #: Reader processes that died: pools started again, and batches' second readings that
        #: killed their process.
        self.restarts = 0
        self._lock = threading.Lock()
        self._pool = self._start()
        #: The process that reads a batch again, alone (started at the first broken pool).
        self._alone: ProcessPoolExecutor | None = None
        self._alone_lock = threading.Lock()

    def _start(self, count: int | None = None) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("forkserver")
        # The server imports the reading code once (this module, which makes the server ignore
        # SIGTERM: _in_the_forkserver); each reader is forked from it, ready.
        context.set_forkserver_preload(["collector.readers"])
        root = logging.getLogger()
        formats = [h.formatter._fmt for h in root.handlers if h.formatter is not None]
        return ProcessPoolExecutor(count or self.count, mp_context=context,
                                   initializer=reader_started,
                                   initargs=(os.getpid(), root.getEffectiveLevel(),
                                             formats[0] if formats else None))

    def warm_up(self) -> None:
        """Start the processes now (the pool starts them at its first batches otherwise)."""
        with self._lock:
            pool = self._pool
        try:
            for future in [pool.submit(_warm) for _ in range(self.count)]:
                future.result()
        except (BrokenProcessPool, CancelledError, RuntimeError):
            pass  # closed meanwhile, or a process died: the batches restart the pool

    def submit(self, topic: str, payload: bytes, known: Known, received_ms: int,
               max_payload_bytes: int) -> Reading:
        """Read one batch in a reader process (in this one, read at once, while the processes
        cannot be started)."""
        args = (topic, payload, known, received_ms, max_payload_bytes)
        if self._in_process_until and time.monotonic() < self._in_process_until:
            return self._read_here(args)
        with self._lock:
            pool = self._pool
        try:
            return Reading(pool.submit(self._read_fn, *args), pool, args)
        except _CANNOT_SUBMIT:  # broken, shut down by a restart meanwhile, or cannot start one
            pool = self._restarted(pool)
        try:
            reading = Reading(pool.submit(self._read_fn, *args), pool, args)
        except _CANNOT_SUBMIT as err:  # a new pool that cannot start its process
            log.error("reader processes cannot be started (%s: %s); batches are read in the "
                      "collector's process, processes tried again in %.0f s",
                      type(err).__name__, err, RETRY_START_S)
            self._in_process_until = time.monotonic() + RETRY_START_S
            with self._lock:  # the batch stays queued in that pool: another, new one instead
                if self._pool is pool:
                    pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = self._start()
            return self._read_here(args)
        self._in_process_until = 0.0
        return reading

    def _read_here(self, args: tuple[str, bytes, Known, int, int]) -> Reading:
        """``args`` read in this process, now: a Reading whose future holds the result."""
        future: Future[Prepared] = Future()
        topic, payload, known, received_ms, max_payload_bytes = args
        future.set_result(prepare(topic, payload, known, received_ms, max_payload_bytes))
        with self._lock:
            return Reading(future, self._pool, args)

    def _restarted(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        """A working pool: a new one if ``broken`` is still the current one."""
        with self._lock:
            if self._pool is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self._pool = self._start()
                self.restarts += 1
                log.error("a batch reader process died or could not be started; reader "
                          "processes started again (%d restart(s) so far)", self.restarts)
            return self._pool

    def result(self, reading: Reading) -> Prepared:
        """The batch read; if its pool broke, read once more alone in a process of its own (the
        pool is started again for the batches to come), and rejected whole if that reading
        kills its process too. Called by one thread (the ingest's worker)."""
        topic, payload, _, received_ms, _ = reading.args
        try:
            return reading.future.result(timeout=self.read_limit_s)
        except (BrokenProcessPool, CancelledError):  # its pool broke, or was replaced
            pass
        except TimeoutError:  # stuck: its pool's processes killed, the batch read again alone
            log.error("%s: a payload of %d bytes was not read in %g s; the batch reader "
                      "processes killed", topic, len(payload), self.read_limit_s)
            _kill(reading.pool)
        self._restarted(reading.pool)
        # Read again alone: the pool that broke held other batches, and the new one gets new
        # batches from paho's thread, any of which may be what kills a reader.
        with self._alone_lock:
            if self._alone is None:
                self._alone = self._start(1)
            try:
                return self._alone.submit(self._read_fn, *reading.args).result(
                    timeout=self.read_limit_s)
            except (BrokenProcessPool, TimeoutError) as err:
                if isinstance(err, TimeoutError):
                    _kill(self._alone)
                self._alone.shutdown(wait=False, cancel_futures=True)
                self._alone = None
                with self._lock:
                    self.restarts += 1
                if isinstance(err, TimeoutError):
                    reason = took_too_long(self.read_limit_s)
                    log.error("%s: a payload of %d bytes was not read in %g s twice; rejected",
                              topic, len(payload), self.read_limit_s)
                    return reject_payload(topic, vehicle_of_topic(topic), payload, reason,
                                          received_ms)
        log.error("%s: a payload of %d bytes killed the batch reader twice; rejected",
                  topic, len(payload))
        return reject_payload(topic, vehicle_of_topic(topic), payload, DIED_READING,
                              received_ms)

    def close(self) -> None:
        """Stop the processes (batches not yet read are cancelled)."""
        with self._lock:
            self._pool.shutdown(wait=True, cancel_futures=True)
        with self._alone_lock:
            if self._alone is not None:
                self._alone.shutdown(wait=True, cancel_futures=True)
                self._alone = None


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill ``pool``'s processes (SIGKILL): its batches then come back as a broken pool's.
    (``ProcessPoolExecutor.kill_workers`` from Python 3.14; before it, its process table.)"""
    kill = getattr(pool, "kill_workers", None)
    if kill is not None:
        kill()
        return
    processes = getattr(pool, "_processes", None) or {}
    for process in list(processes.values()):
        with contextlib.suppress(OSError, ValueError):  # already gone, or closed
            process.kill()


# The forkserver's end is every reader's end to its pool (the pipe of their exit statuses closes):
# it ignores SIGTERM as they do (reader_started), and its readers are forked ignoring it. It ends
# on its own with the collector (its pipe from the collector closes); SIGINT it ignores already.
if _imported_by_the_forkserver():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
