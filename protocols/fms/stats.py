"""What the FMS decoder counts: DecoderStats plus what it set aside and the BAM counters."""

from __future__ import annotations

from dataclasses import dataclass, fields

from protocols.base import DecoderStats


@dataclass
class FmsStats(DecoderStats):
    """DecoderStats plus what the FMS decoder set aside, and the transport protocol's counts."""

    foreign: int = 0
    """Frames of parameter groups Frota does not read (most of a bus's traffic)."""
    not_available: int = 0
    """Frames whose needed value was sent as "not available" (no record from them)."""
    sampled_out: int = 0
    """TCO1 frames that gave no speed record (the 1 Hz sampling)."""
    undated: int = 0
    """Records dropped for want of a time (no TD from the tachograph, no estimate)."""
    estimated: int = 0
    """Records dated by the consumer's estimate because the tachograph sent no TD."""
    receive_steps: int = 0
    """TDs that showed the receive clock stepped (e.g. the Pi's clock set), not the tachograph's."""
    held: int = 0
    """Frames waiting for the first TD right now."""
    error_frames: int = 0
    """Error and remote frames (python-can's ``is_error_frame``/``is_remote_frame``)."""
    bam_complete: int = 0
    bam_incomplete: int = 0
    bam_orphans: int = 0
    bam_duplicates: int = 0
    bam_malformed: int = 0
    connection_mode: int = 0

    def summary(self) -> dict[str, int]:
        """The counters as a dict, the FMS ones included."""
        base = super().summary()
        extra = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in base}
        extra.pop("rejected", None)
        return {**base, **extra}
