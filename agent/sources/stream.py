"""Sources for devices that talk on their own (registrador, GPS): read bytes, feed the decoder."""

from __future__ import annotations

import time

import serial

from agent.sources.base import Source


class StreamSource(Source):
    """Reads whatever the device sends and decodes it; silence past ``silent_after_s`` reopens."""

    def idle(self) -> None:
        """Called when a read times out (no byte for a moment): a hook for requests to the device."""

    def session(self, port: serial.Serial) -> None:
        """Read until silent, hung up or stopped."""
        self.last_data_mono = None
        opened = time.monotonic()
        while not self.stop.is_set():
            data = port.read(max(1, min(port.in_waiting, 4096)))
            if data:
                self.data_arrived()
                self.deliver(self.decoder.feed(data))
                continue
            self.idle()
            since = self.last_data_mono if self.last_data_mono is not None else opened
            if time.monotonic() - since >= self.config.silent_after_s:
                return
        finish = getattr(self.decoder, "finish", None)
        if callable(finish):
            self.deliver(list(finish()))
