"""A serial source: one device, one thread; reopened with backoff when it vanishes or falls silent.

Opened with :func:`serial.serial_for_url`, so a path, a pty or ``loop://`` all work. What goes
wrong on the line is reported as canonical ``device`` records (``disconnected``, ``silent``, then
``ok`` when the device is back), never raised: one failing device never stops the others.
"""

from __future__ import annotations

import logging
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import serial

from agent.config import DeviceConfig
from agent.timekeeper import TimeKeeper
from protocols import registry
from protocols.base import Decoder
from protocols.records import Record, make_record

log = logging.getLogger(__name__)

#: Where records go: (source name, records) → the buffer writer.
Sink = Callable[[str, list[Record]], None]
#: A listener to a device's raw bytes (``frota agent capture``): (time keeper's ms, bytes).
Tap = Callable[[int, bytes], None]


@dataclass(frozen=True)
class StateHooks:
    """How a source with a memory (the door counters) saves it with its records and gets it back.

    ``save(source, records, state)`` queues records with the state they leave the decoder in (one
    transaction); ``load()`` reads the state last committed; ``resume()`` tells the writer the
    source has gone back to that state after a full disk dropped some of its records.
    """

    save: Callable[[str, list[Record], str], None]
    load: Callable[[], str | None]
    resume: Callable[[], None]


#: What a line that went away raises: pyserial wraps most OS errors in SerialException, but not
#: termios' own (a flush or line setting on a hung-up tty fails with ``termios.error``, EIO).
LINE_ERRORS = (serial.SerialException, OSError, termios.error)


@dataclass(frozen=True)
class SourceContext:
    """What the agent gives every source: one object, whatever the device.

    ``last_device_seq()`` is the last frame number captured from the source (from the buffer),
    where a device with a memory (the registrador) starts its catch-up; ``state`` lets a source
    save its memory with its records and get it back after a restart (None: records alone).
    """

    vehicle: str
    sink: Sink
    clock: TimeKeeper
    stop: threading.Event
    last_device_seq: Callable[[], int | None] = lambda: None
    state: StateHooks | None = None
    #: The doors an RS-485 counter reports: another source that sees doors (FMS door control)
    #: leaves them alone, so no door has two sources.
    counted_doors: frozenset[int] = frozenset()


#: How long one read waits for bytes (seconds); bounds the reaction to stop and to silence.
READ_TIMEOUT_S = 0.5


class Line(Protocol):
    """What :meth:`Source.open` returns: a serial port, or a source's own kind of line."""

    def close(self) -> None:
        """Close the line (errors of a line already gone are the source's to swallow or raise
        as ``LINE_ERRORS``)."""
        ...


class SourceClosed(OSError):  # noqa: N818 - an event on the line, not a program error
    """The line went away (unplugged, hung up); the source reopens it."""


class Source:
    """The common loop: open, read or poll, report health, reopen with exponential backoff.

    A device's source overrides :meth:`session` (how it reads) and, if it keeps a memory that
    must be committed with its records, the one hook :meth:`state_for`.
    """

    def __init__(self, config: DeviceConfig, context: SourceContext) -> None:
        entry = registry.get(config.protocol)
        self.config = config
        self.context = context
        self.name = config.name
        self.vehicle = context.vehicle
        self.sink = context.sink
        self.clock = context.clock
        self.stop = context.stop
        self.state = context.state
        #: True when the device stamps its records with its own clock (the registry's entry);
        #: otherwise the decoder is given the time keeper's estimate before each read.
        self.clocked = entry.clocked
        self.decoder: Decoder = entry.make_decoder(context.vehicle)
        #: False while the source reads a backlog (bytes waiting in its port): the device times
        #: of those records are behind "now" and do not set the agent's time.
        self.live = True
        self.health: str | None = None  # None until the first report; then ok/disconnected/silent
        self.records = 0
        self.reopens = 0
        self.last_data_mono: float | None = None
        #: Listeners to the raw bytes (agent/capture.py); replaced whole, never changed in place.
        self.taps: tuple[Tap, ...] = ()
        self._thread = threading.Thread(target=self._run, name=f"source-{self.name}", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the source's thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to finish (after ``stop`` is set)."""
        self._thread.join(timeout)

    def open(self) -> Line:
        """Open the line (by default the serial port, with the configured settings)."""
        cfg = self.config
        return serial.serial_for_url(
            cfg.port,
            baudrate=cfg.baudrate,
            bytesize=cfg.bytesize,
            parity=cfg.parity,
            stopbits=cfg.stopbits,
            timeout=READ_TIMEOUT_S,
            write_timeout=1.0,
            # flock: a second opener (another agent, a capture) is refused, never shares the line.
            exclusive=True,
        )

    def _run(self) -> None:
        cfg = self.config
        backoff = cfg.reopen_min_s
        while not self.stop.is_set():
            try:
                port = self.open()
            except (*LINE_ERRORS, ValueError, SourceClosed) as err:
                self.report("disconnected", f"cannot open {cfg.port}: {_reason(err)}")
                self.stop.wait(backoff)
                backoff = min(backoff * 2, cfg.reopen_max_s)
                continue
            try:
                self.session(port)
                if not self.stop.is_set():
                    self.report("silent", f"no data for {cfg.silent_after_s:g}s on {cfg.port}")
            except (*LINE_ERRORS, SourceClosed) as err:
                self.report("disconnected", f"{cfg.port}: {_reason(err)}")
            except Exception:  # a bug must not kill the source; it is logged and the line reopened
                log.exception("%s: unexpected error; reopening the line", self.name)
            finally:
                try:
                    port.close()
                except LINE_ERRORS as err:
                    log.debug("%s: close failed: %s", self.name, err)
            if self.health == "ok":
                backoff = cfg.reopen_min_s
            if self.stop.is_set():
                break
            self.reopens += 1
            self.stop.wait(backoff)
            backoff = min(backoff * 2, cfg.reopen_max_s)
        self.finished()

    def finished(self) -> None:
        """The agent is stopping (whether the line is open or not): hand on what is pending."""

    def session(self, port: Any) -> None:
        """Read until the device falls silent (return), the line fails (raise) or stop is set."""
        raise NotImplementedError

    def tee(self, data: bytes, ts_ms: int | None = None) -> None:
        """Hand raw bytes of the line to the taps (a capture), stamped as records are."""
        taps = self.taps
        if taps:
            now = self.clock.now_ms()[0] if ts_ms is None else ts_ms
            for tap in taps:
                tap(now, data)

    # -- records ---------------------------------------------------------------------------
    def data_arrived(self) -> None:
        """Note that the device spoke; report ``ok`` if it had been reported missing."""
        self.last_data_mono = time.monotonic()
        if self.health not in (None, "ok"):
            self.report("ok", f"{self.config.port}: data again")
        self.health = "ok"

    def decode(self, data: bytes) -> list[Record]:
        """Bytes read from the device → records; a device without a clock gets the time now."""
        if not self.clocked:
            self.decoder.set_time(self.clock.now_ms()[0])
        return self.decoder.feed(data)

    def deliver(self, records: list[Record]) -> None:
        """Hand records (maybe none) to the buffer, with the source's state if it keeps one;
        a device's clock sets the agent's time."""
        state = self.state_for(records)
        if records and self.clocked and self.live:
            self.observe_clock(records)
        if state is not None and self.state is not None:
            self.records += len(records)
            self.state.save(self.name, records, state)
        elif records:
            self.records += len(records)
            self.sink(self.name, records)

    def observe_clock(self, records: list[Record]) -> None:
        """A clocked device's records tell the time keeper what time it is now (the registrador
        overrides it: a frame downloaded from its memory is not the time now)."""
        self.clock.observe(records[-1]["ts"], self.name)

    def state_for(self, records: list[Record]) -> str | None:
        """The one hook of :meth:`deliver`: note a batch about to be committed (maybe empty) and
        return the state to commit with it in the same transaction, or None for none (the
        records alone; nothing at all for an empty batch)."""
        return None

    def dropped(self, records: list[Record]) -> None:
        """A full disk made the buffer drop these records of ours (called from the writer thread).

        By default they are lost (GPS positions: the receiver keeps no memory); the registrador
        fetches its frames again, the door counters go back to their committed state.
        """

    def report(self, status: str, detail: str) -> None:
        """A ``device`` record about this device's health (only on a change of state)."""
        if status == self.health:
            return
        self.health = status
        log.warning("%s: %s (%s)", self.name, status, detail) if status != "ok" else log.info(
            "%s: ok (%s)", self.name, detail
        )
        self.sink("agent", [agent_record(self.vehicle, self.clock, self.config.device, status, detail)])


def _reason(err: BaseException) -> str:
    """An error as one line: ``termios.error`` is a bare (errno, text) tuple."""
    if isinstance(err, termios.error) and len(err.args) == 2:
        return f"[Errno {err.args[0]}] {err.args[1]}"
    return str(err)


def agent_record(vehicle: str, clock: TimeKeeper, device: str, status: str, detail: str) -> Record:
    """A ``device`` record made by the agent, stamped by the time keeper (saying if host clock)."""
    ts, synced = clock.now_ts()
    if not synced:
        detail = f"{detail}; ts from the host clock (no device time seen yet)"
    return make_record("device", vehicle, ts, device=device, status=status, detail=detail)
