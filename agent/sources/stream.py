"""Sources for devices that talk on their own (registrador, GPS): read bytes, feed the decoder."""

from __future__ import annotations

import time

import serial

from agent.sources.base import Source

#: The gap in the bytes that ends a read (seconds): ~50 characters at 9600 baud.
INTER_BYTE_S = 0.005
#: The most bytes one read returns.
READ_MAX = 4096


class StreamSource(Source):
    """Reads whatever the device sends and decodes it; silence past ``silent_after_s`` reopens."""

    def idle(self) -> None:
        """Called when a read times out (no byte for a moment): a hook for requests to the device."""

    def session(self, port: serial.Serial) -> None:
        """Read until silent, hung up or stopped."""
        self.last_data_mono = None
        opened = time.monotonic()
        # A burst (a frame, a few NMEA sentences) is read whole: the read returns after a short
        # gap in the bytes rather than at the first byte — one wake-up per burst on the Pi.
        port.inter_byte_timeout = INTER_BYTE_S
        while not self.stop.is_set():
            data = port.read(READ_MAX)
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
