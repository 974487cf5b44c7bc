"""The registrador (tachograph): a stream source whose records carry the device's clock.

Its frames carry ``device_seq``; the buffer deduplicates on it, so frames fetched again by a
history request (the catch-up of the next issue) and frames received live are one record.
"""

from __future__ import annotations

from agent.sources.stream import StreamSource


class RegistradorSource(StreamSource):
    """Reads the registrador's frames; its time stamps every clockless record (time keeper)."""

    clocked = True
