"""Sources for devices that talk on their own (registrador, GPS): read bytes, feed the decoder.

:class:`StreamSource` is complete for a device that only talks (the GPS's registry entry names it
directly); a device that also takes requests (the registrador) subclasses it and uses ``idle``.
"""

from __future__ import annotations

import time

import serial

from agent.sources.base import Source

#: The gap in the bytes that ends a read (seconds): ~50 characters at 9600 baud.
INTER_BYTE_S = 0.005
#: The most bytes one read returns. A burst of a real device (a registrador frame, a second of
#: NMEA sentences) is smaller, so at real rates a read still ends at the gap after the burst; on
#: a line that never falls silent (a backlog, a simulator at a time scale) it bounds how stale
#: the latest device time is when a clockless device (the doors) is stamped from it: 512 bytes
#: are 44 ms at 115200 baud. With 4096, reads of a continuous stream lasted the whole read
#: timeout (0.5 s), and at the demo's 112x that put door records 56 s of device time early.
READ_MAX = 512


class StreamSource(Source):
    """Reads whatever the device sends and decodes it; silence past ``silent_after_s`` reopens."""

    def idle(self) -> None:
        """Called after every read (bytes or none): a hook for requests to the device."""

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
                self.tee(data)
                self.data_arrived()
                self.deliver(self.decode(data))
                self.idle()
                continue
            self.idle()
            since = self.last_data_mono if self.last_data_mono is not None else opened
            if time.monotonic() - since >= self.config.silent_after_s:
                return
        self.deliver(self.decoder.finish())
