"""The GPS receiver (NMEA 0183): a stream source whose positions carry the receiver's UTC time."""

from __future__ import annotations

from agent.sources.stream import StreamSource


class GpsSource(StreamSource):
    """Reads NMEA sentences; GPS time also feeds the time keeper."""

    clocked = True
