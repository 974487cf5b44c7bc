"""The agent: the one place that wires sources, decoders, the buffer and the uplink together.

Sources (one thread per serial device) decode frames into records and hand them to the buffer
writer, which captures them in batched commits; the uplink sends what is pending and marks what
the collector stored. SIGTERM/SIGINT stop the sources, flush the buffer and say ``offline``.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from types import FrameType

from agent.buffer import Buffer
from agent.capture import CaptureServer, socket_path
from agent.clockwatch import ClockWatch
from agent.config import AgentConfig
from agent.sources import Source, make_source
from agent.sources.base import StateHooks, agent_record
from agent.sources.registrador import RegistradorSource
from agent.systemd import Notifier
from agent.timekeeper import TimeKeeper
from agent.uplink import Uplink
from agent.writer import BufferWriter
from protocols.records import Record
from protocols.uplink import mask_url

log = logging.getLogger("agent")

#: How often the agent logs its counters (seconds).
STATUS_EVERY_S = 10.0
#: How often uploaded records past the retention are deleted (seconds).
EXPIRE_EVERY_S = 3600.0
#: How long a stopping agent waits for the collector to confirm what is pending (seconds).
DRAIN_ON_STOP_S = 3.0


class Agent:
    """Sources → buffer → uplink for one vehicle."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.stop_event = threading.Event()
        self.clock = TimeKeeper()
        self.wake = threading.Event()
        buf = config.buffer
        self.writer = BufferWriter(
            buf.path, buf.commit_records, buf.commit_interval_ms, buf.max_bytes,
            int(buf.reserve_mb * 1024 * 1024),
        )
        self.writer.notify(self.wake)
        self.writer.full_record = functools.partial(self._own, "buffer_full")
        self.writer.on_drop = self._dropped
        self.uplink = Uplink(config, self.wake)
        # A connection of its own for status and the sources' catch-up queries (under a lock).
        self.reader = Buffer(buf.path)
        self._reader_lock = threading.Lock()
        self.notifier = Notifier()
        self.clock_watch = ClockWatch()
        self.sources: list[Source] = [
            make_source(
                device, config.vehicle, self._sink, self.clock, self.stop_event,
                last_device_seq=functools.partial(self._last_device_seq, device.name),
                state=StateHooks(
                    save=self._sink_state,
                    load=functools.partial(self._source_state, device.name),
                    resume=functools.partial(self.writer.resume, device.name),
                ),
                counted_doors=config.counted_doors,
            )
            for device in config.devices
        ]
        self._by_name = {source.name: source for source in self.sources}
        # frota agent capture: a device's raw bytes, teed by its source (agent/capture.py).
        self.capture = CaptureServer(socket_path(buf.path), self._by_name)
        for source in self.sources:
            if isinstance(source, RegistradorSource):
                source.captured_runs = functools.partial(self._captured_runs, source.name)

    @property
    def agent_id(self) -> str:
        """The buffer's agent id."""
        return self.writer.agent

    def _last_device_seq(self, source: str) -> int | None:
        with self._reader_lock:
            return self.reader.last_device_seq(source)

    def _captured_runs(self, source: str, first: int, last: int) -> list[tuple[int, int]]:
        with self._reader_lock:
            return self.reader.captured_runs(source, first, last)

    def _source_state(self, source: str) -> str | None:
        with self._reader_lock:
            return self.reader.source_state(source)

    def _sink_state(self, source: str, records: list[Record], state: str) -> None:
        self.writer.put_many(source, records, state)

    def _dropped(self, source: str, records: list[Record]) -> None:
        found = self._by_name.get(source)
        if found is not None:
            found.dropped(records)

    def backlog(self) -> int:
        """Records not yet answered by the collector."""
        with self._reader_lock:
            return self.reader.pending_count()

    def _sink(self, source: str, records: list[Record]) -> None:
        self.writer.put_many(source, records)

    def start(self) -> None:
        """Start the writer, the uplink and every source."""
        self.writer.start()
        self.uplink.start()
        self._sink("agent", [self._own("ok", f"agent {self.agent_id} started")])
        for source in self.sources:
            source.start()
        self.capture.start()
        log.info(
            "agent %s for %s: %d device(s), buffer %s, broker %s",
            self.agent_id, self.config.vehicle, len(self.sources), self.config.buffer.path,
            mask_url(self.config.broker.url),
        )

    def _own(self, status: str, detail: str) -> Record:
        return agent_record(self.config.vehicle, self.clock, "agent", status, detail)

    def status_line(self) -> str:
        """One line of counters: received, captured, sent, stored, backlog."""
        up = self.uplink.stats
        received = sum(s.records for s in self.sources)
        health = " ".join(f"{s.name}={s.health or '-'}" for s in self.sources)
        return (
            f"received={received} captured={self.writer.captured} dupes={self.writer.duplicates} "
            f"sent={up.records_sent} stored={up.stored} rejected={up.rejected} "
            f"conflicts={up.conflicts} acks_ignored={self.uplink.gate.counters.ignored} "
            f"backlog={self.backlog()} broker={'up' if up.connected else 'down'} {health}"
        )

    def healthy(self) -> bool:
        """True while the threads that must never stop are alive (the watchdog's condition)."""
        return self.writer.alive and self.uplink.alive

    def check_clock(self) -> None:
        """Record host clock steps, and a host clock far from device time, as ``clock_jump``."""
        device_ms, synced = self.clock.now_ms()
        for detail in self.clock_watch.check(device_ms if synced else None):
            log.warning("%s", detail)
            self._sink("agent", [self._own("clock_jump", detail)])

    def expire(self) -> int:
        """Delete records the collector stored that are older than the retention (device time)."""
        device_ms, synced = self.clock.now_ms()
        if not synced:
            return 0  # never judge age by the host clock alone: it may be years off
        before = device_ms - self.config.buffer.retention_days * 86_400_000
        deleted = 0
        with self._reader_lock:
            while (n := self.reader.expire(before)) > 0:
                deleted += n
        if deleted:
            log.info("retention: %d uploaded records older than %d days deleted", deleted,
                     self.config.buffer.retention_days)
        return deleted

    def run(self) -> None:
        """Run until SIGTERM/SIGINT (or :meth:`request_stop`), then shut down cleanly."""
        self.start()
        self.notifier.ready()
        tick = min(1.0, self.notifier.watchdog_interval or 1.0)
        last = time.monotonic()
        last_expiry: float | None = None
        try:
            while not self.stop_event.wait(tick):
                if self.healthy():
                    self.notifier.watchdog()
                self.check_clock()
                due = last_expiry is None or time.monotonic() - last_expiry >= EXPIRE_EVERY_S
                if due and self.clock.synced:
                    last_expiry = time.monotonic()
                    self.expire()
                if time.monotonic() - last >= STATUS_EVERY_S:
                    last = time.monotonic()
                    line = self.status_line()
                    log.info("%s", line)
                    self.notifier.status(line)
        finally:
            self.notifier.stopping()
            self.shutdown()

    def request_stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """Ask the agent to stop (signal handler)."""
        self.stop_event.set()

    def shutdown(self) -> None:
        """Stop the sources, flush the buffer, say offline and disconnect."""
        self.stop_event.set()
        self.capture.close()
        for source in self.sources:
            source.join(timeout=5.0)
        self._sink("agent", [self._own("ok", f"agent {self.agent_id} stopping")])
        self.writer.stop()
        # While the broker is there, send what is pending and wait a little for the answers;
        # whatever is left stays in the buffer for the next start.
        if not self.uplink.drain(DRAIN_ON_STOP_S):
            log.info("stopping with %d records not yet confirmed", self.backlog())
        self.uplink.stop()
        log.info("stopped: %s", self.status_line())
        with self._reader_lock:
            self.reader.close()


def run(config: AgentConfig) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT; return the exit status."""
    agent = Agent(config)
    signal.signal(signal.SIGTERM, agent.request_stop)
    signal.signal(signal.SIGINT, agent.request_stop)
    agent.run()
    return 0
