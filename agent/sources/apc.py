"""The door counters: an RS-485 multi-drop line the agent polls by address (it is the only master).

Door sensors have no clock: every request and answer is fed to the decoder with the time
keeper's estimate (latest device time + monotonic time since), as docs/records.md says.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import serial

from agent.config import DeviceConfig
from agent.sources.base import Source, SourceContext
from protocols.apc import Poller
from protocols.apc.poller import MIN_GAP_MS, char_ms
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

    def _exchange(self, port: serial.Serial, request: bytes) -> bool:
        """Send one request, read its answer until a frame completes or the reply times out."""
        port.reset_input_buffer()
        port.write(request)
        now = self.clock.now_ms()[0]
        self.tee(request, now)  # a capture holds the polls too: the decoder needs them
        records = self.poller.feed(request, now)
        frames = self.decoder.stats.frames
        deadline = time.monotonic() + self.config.reply_timeout_s
        answered = False
        while time.monotonic() < deadline and not self.stop.is_set():
            data = port.read(256)  # returns at the silence that ends the answer
            if not data:
                continue
            answered = True
            now = self.clock.now_ms()[0]
            self.tee(data, now)
            records += self.poller.feed(data, now)
            if self.decoder.stats.frames > frames:
                break
        self.deliver(records)
        return answered

    def session(self, port: serial.Serial) -> None:
        """Poll round after round until every sensor is silent too long, the line fails or stop."""
        port.timeout = min(0.02, self.config.reply_timeout_s)
        # The line's end-of-frame silence (3.5 characters, at least 2 ms: firmware-notes/apc.md)
        # ends a read, so an answer is read whole in one wake-up.
        port.inter_byte_timeout = max(MIN_GAP_MS / 1000, 3.5 * char_ms(self.config.baudrate) / 1000)
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
