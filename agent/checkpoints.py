"""When the agent signs checkpoints of its chain (``firmware-notes/mqtt.md``, ``docs/trust.md``):
with every batch, at the batch's last seq, and at least once a minute by the agent's monotonic
clock at its newest recorded seq — even when little or nothing is sent (the broker is away, the
in-flight window is full), so what the bus recorded is signed within a minute of being recorded.
If nothing new was recorded since the last checkpoint, none is owed. A checkpoint signed by the
timer is *held* until it can be sent: alone in a batch with no records, or dropped when a batch's
own checkpoint covers its seq (one checkpoint covers every record before it through the chain).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from cryptography.hazmat.primitives.asymmetric import ed25519

from protocols.chain import sign_checkpoint

if TYPE_CHECKING:
    from agent.buffer import Buffer

#: Seconds of the agent's monotonic clock between checkpoints while records are being recorded.
CHECKPOINT_EVERY_S: Final = 60.0


class CheckpointSigner:
    """Signs (vehicle, agent) chain checkpoints per batch and per minute."""

    def __init__(self, key: ed25519.Ed25519PrivateKey, vehicle: str, agent: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key, self.vehicle, self.agent = key, vehicle, agent
        self.clock = clock
        #: The highest seq signed so far, and when (by ``clock``); the minute counts from start.
        self.signed_seq = 0
        self.signed_at = clock()
        #: A checkpoint signed by the timer and not sent yet (its JSON).
        self.held: dict[str, object] | None = None
        self.timer_signed = 0

    def for_batch(self, seq: int, digest: str) -> dict[str, object]:
        """The checkpoint a batch ending at ``seq`` carries."""
        cp = sign_checkpoint(self.key, self.vehicle, self.agent, seq, digest).json()
        self._signed(seq)
        if self.held is not None and int(str(self.held["seq"])) <= seq:
            self.held = None  # this batch's checkpoint covers it
        return cp

    def owed(self, newest_seq: int) -> bool:
        """True when a minute has passed since the last checkpoint and something was recorded
        after it."""
        return newest_seq > self.signed_seq and self.clock() - self.signed_at >= CHECKPOINT_EVERY_S

    def tick(self, buffer: Buffer) -> None:
        """Sign and hold the minute's checkpoint at the buffer's newest seq, if one is owed."""
        newest = buffer.last_seq()
        if self.owed(newest):
            digest = buffer.hashes([newest]).get(newest)
            if digest is not None:
                self.sign_newest(newest, digest)

    def sign_newest(self, seq: int, digest: str) -> dict[str, object]:
        """Sign the chain at the newest recorded ``seq`` (the timer's checkpoint) and hold it."""
        self.held = sign_checkpoint(self.key, self.vehicle, self.agent, seq, digest).json()
        self._signed(seq)
        self.timer_signed += 1
        return self.held

    def _signed(self, seq: int) -> None:
        # Only a checkpoint that reaches the newest signed seq restarts the minute: a backlog
        # batch's checkpoint signs old records, not the ones being recorded now.
        if seq >= self.signed_seq:
            self.signed_seq = seq
            self.signed_at = self.clock()
