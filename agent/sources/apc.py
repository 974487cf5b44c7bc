"""The door counters: an RS-485 multi-drop line the agent polls by address (it is the only master).

Door sensors have no clock: every request and answer is fed to the decoder with the time
keeper's estimate (latest device time + monotonic time since), as docs/records.md says
(firmware-notes/agent.md, "Clocks").
Before any device time, door records are held, not stamped by the Pi's clock: their passengers
stay in the decoder (and the state saved with the records) and go out at the first device time.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import serial

from agent.config import DeviceConfig
from agent.sources.base import Source, SourceContext
from agent.sources.stream import read_burst
from protocols.apc import Poller
from protocols.records import Record

log = logging.getLogger(__name__)


class ApcSource(Source):
    """Polls each configured sensor every ``poll_interval_s``; silence of all of them reopens."""

    def __init__(self, config: DeviceConfig, context: SourceContext) -> None:
        super().__init__(config, context)
        self.poller = Poller(
            context.vehicle,
            [c.address for c in config.counters],
            {c.address: c.door_number for c in config.counters},
        )
        self.decoder = self.poller.decoder
        self._restore = threading.Event()  # set: take back the committed state before polling
        self._restore.set()
        self._saved: dict[str, dict[str, object]] = {}  # the state last handed over, answers left out
        self._dated = False  # a device time is known: records are stamped, no longer held

    def dropped(self, records: list[Record]) -> None:
        """A full disk dropped records of ours: go back to the state last committed."""
        self._restore.set()

    def _restore_state(self) -> None:
        """Take back the baselines committed with our last records (after a restart or a drop)."""
        self._restore.clear()
        if self.state is None:
            return
        text = self.state.load()
        try:
            saved = json.loads(text) if text else {}
        except ValueError:
            saved = {}
        restored = self.poller.decoder.restore(saved if isinstance(saved, dict) else {})
        self._saved = {}
        log.info("%s: counters' state restored for %d sensor(s)", self.name, restored)
        self.state.resume()

    def state_for(self, records: list[Record]) -> str | None:
        """Records come stamped by the decoder with the time keeper's estimate; the decoder's
        state after them is committed with them."""
        if self.state is None:
            return None
        # The state goes with the records, and on its own whenever a baseline moves (a first
        # answer, passengers counted): a restart then counts from it, not from a later answer.
        state = self.poller.decoder.state()
        moved = {a: {**d, "answers": 0} for a, d in state.items()}
        if records or moved != self._saved:
            self._saved = moved
            return json.dumps(state, separators=(",", ":"))
        return None

    def _now_ms(self) -> int | None:
        """The time keeper's estimate, or None before any device time: door records are then
        held (their passengers kept in the decoder and its saved state), never stamped by the
        Pi's clock, which may be years off (firmware-notes/agent.md, "Clocks")."""
        if not self._dated:
            return None
        return self.clock.now_ms()[0]

    def _held_records(self) -> list[Record]:
        """At the first device time, the passengers held while there was none: one ``door``
        record per door that counted some, stamped with that time."""
        if self._dated:
            return []
        ms, synced = self.clock.now_ms()
        if not synced:
            return []
        self._dated = True
        decoder = self.poller.decoder
        if decoder.stats.undated == 0:
            return []
        decoder.set_time(ms)
        held = decoder.report_pending()
        if held:
            log.info("%s: %d passengers counted before any device time placed at it",
                     self.name, sum(r["boarded"] + r["alighted"] for r in held))
        return held

    def _exchange(self, port: serial.Serial, request: bytes) -> bool:
        """Send one request, read its answer until a frame completes or the reply times out."""
        port.reset_input_buffer()
        port.write(request)
        records = self._held_records()
        now = self._now_ms()
        # a capture holds the polls too, with the time the decoder is given
        self.tee(request, self.clock.now_ms()[0] if now is None else now)
        records += self.poller.feed(request, now)
        frames = self.decoder.stats.frames
        deadline = time.monotonic() + self.config.reply_timeout_s
        answered = False
        while time.monotonic() < deadline and not self.stop.is_set():
            data = read_burst(port)  # returns at the silence that ends the answer
            if not data:
                continue
            answered = True
            now = self._now_ms()
            self.tee(data, self.clock.now_ms()[0] if now is None else now)
            records += self.poller.feed(data, now)
            if self.decoder.stats.frames > frames:
                break
        self.deliver(records)
        return answered

    def session(self, port: serial.Serial) -> None:
        """Poll round after round until every sensor is silent too long, the line fails or stop."""
        port.timeout = min(0.02, self.config.reply_timeout_s)
        self.last_data_mono = None
        opened = time.monotonic()
        while not self.stop.is_set():
            if self._restore.is_set():
                self._restore_state()
            started = time.monotonic()
            for _ in range(len(self.poller.addresses) + len(self.poller.decoder.pending_acks())):
                if self._exchange(port, self.poller.next_request()):
                    self.data_arrived()
            since = self.last_data_mono if self.last_data_mono is not None else opened
            if time.monotonic() - since >= self.config.silent_after_s:
                return
            self.stop.wait(max(0.0, self.config.poll_interval_s - (time.monotonic() - started)))

    def finished(self) -> None:
        """Stopping: report the counts of doors still open, even with the line gone (a door
        counted, then the cable pulled, then SIGTERM: those passengers are in no record yet)."""
        if self._restore.is_set():  # never polled since the start or a drop: the committed state
            self._restore_state()   # is the truth, and an empty decoder must not overwrite it
        self.deliver(self.poller.decoder.finish())
