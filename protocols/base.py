"""What every wire-format decoder in ``protocols/`` shares: its statistics and its interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from protocols.records import Record

#: How many rejected chunks a decoder keeps (hex) for inspection; older ones are forgotten.
MAX_KEPT_REJECTS = 64


@dataclass
class DecoderStats:
    """Counters of what a decoder skipped; wire garbage is data, never an exception."""

    frames: int = 0
    bytes_in: int = 0
    bytes_dropped: int = 0
    crc_failures: int = 0
    unknown_types: int = 0
    malformed: int = 0
    skipped: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)

    def reject(self, reason: str, raw: bytes) -> None:
        """Remember a rejected chunk (reason, hex), keeping only the latest few."""
        self.rejected.append((reason, raw.hex()))
        if len(self.rejected) > MAX_KEPT_REJECTS:
            del self.rejected[0]

    def summary(self) -> dict[str, int]:
        """The counters as a dict (for the CLI's stderr summary and the agent's status)."""
        return {
            "frames": self.frames,
            "bytes_in": self.bytes_in,
            "bytes_dropped": self.bytes_dropped,
            "crc_failures": self.crc_failures,
            "unknown_types": self.unknown_types,
            "malformed": self.malformed,
            "skipped": self.skipped,
        }


class Decoder(Protocol):
    """A stream decoder: keeps its own buffer, reads no clock, does no I/O, never raises on data.

    Registered in ``protocols.registry``; every caller (``frota decode``, the agent's sources,
    tests) drives it through these four members only.
    """

    @property
    def stats(self) -> DecoderStats:
        """What the decoder counted and skipped (a decoder may add its own counters)."""
        ...

    def feed(self, data: bytes) -> list[Record]:
        """Consume bytes from the wire and return the records completed by them."""
        ...

    def finish(self) -> list[Record]:
        """End of input: the records still pending (a partial frame is dropped and counted)."""
        ...

    def set_time(self, ts_ms: int) -> None:
        """The clock hook: the caller's time now (ms since the epoch), for the records of the
        next bytes. Devices without a clock (registry ``clocked=False``) stamp their records
        with it; devices with a clock ignore it."""
        ...
