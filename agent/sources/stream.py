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
#: NMEA sentences) is smaller, so at real rates a read ends at the gap after the burst; on a
#: line that never falls silent (a backlog, a simulator at a time scale) it bounds how stale
#: the latest device time is when a clockless device (the doors) is stamped from it: 512 bytes
#: are 44 ms at 115200 baud.
READ_MAX = 512


def read_burst(port: serial.Serial) -> bytes:
    """One burst of bytes: waits (up to the port's read timeout) for the first byte, then takes
    what follows until a gap of ``INTER_BYTE_S`` or ``READ_MAX`` bytes.

    Hand-rolled because pyserial cannot end a read at a short gap on POSIX: its read loops on
    select until ``size`` bytes or the whole timeout, and ``inter_byte_timeout`` only sets
    VTIME, in tenths of a second (5 ms rounds to 0, no effect). ``read(512)`` therefore waited
    the full 0.5 s for the last bytes of every burst shorter than 512: a history end sat half a
    second before the next request went out, and records of clockless devices were stamped
    from a device time up to 0.5 s stale.
    """
    first = port.read(1)
    if not first:
        return first
    data = bytearray(first)
    while len(data) < READ_MAX:
        waiting = port.in_waiting
        if not waiting:
            time.sleep(INTER_BYTE_S)  # a gap this short is inside a burst; longer ends it
            waiting = port.in_waiting
            if not waiting:
                break
        data += port.read(min(waiting, READ_MAX - len(data)))
    return bytes(data)


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
        while not self.stop.is_set():
            data = read_burst(port)
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
