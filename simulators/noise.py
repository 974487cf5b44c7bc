"""Line noise for simulated serial devices: bit errors, dropped bytes, garbage bursts, unplugging.

Noise is applied per *chunk* (one frame, one NMEA sentence, one RS-485 reply) so the runner can
tell whether the chunk went out intact: garbage is inserted *before* a chunk and leaves it
intact; a flipped bit or a dropped byte inside it does not. Unplug/replug is scheduled here and
carried out by the runner (it closes the pty master, so the reader sees a hangup, then opens a
new one). Everything is drawn from one seeded ``random.Random`` so a run can be repeated.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class NoiseConfig:
    """How noisy the line is; all zero means a clean line."""

    ber: float = 0.0
    """Bit-error rate: probability that any one transmitted bit is flipped."""
    drop: float = 0.0
    """Probability that any one byte is lost (a UART overrun)."""
    garbage: float = 0.0
    """Garbage as a fraction of transmitted bytes, sent in bursts between chunks."""
    burst: int = 16
    """Mean length of a garbage burst, in bytes (bursts are 1 … 2×burst−1 bytes)."""
    unplug_every_s: float = 0.0
    """Mean device-time seconds between unplugs (exponential); 0 = never."""
    unplug_for_s: float = 5.0
    """Device-time seconds the cable stays out before it is plugged back."""
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("ber", "drop", "garbage"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), not {value}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, not {self.burst}")
        if self.unplug_every_s < 0 or self.unplug_for_s < 0:
            raise ValueError("unplug intervals must be >= 0")

    @property
    def clean(self) -> bool:
        """True when no noise at all is configured."""
        return self.ber == 0 and self.drop == 0 and self.garbage == 0 and self.unplug_every_s == 0


class Noise:
    """Applies a :class:`NoiseConfig` to outgoing chunks and schedules unplugs."""

    def __init__(self, config: NoiseConfig | None = None) -> None:
        self.config = config or NoiseConfig()
        self.rng = random.Random(self.config.seed)
        self._byte_error = 1.0 - (1.0 - self.config.ber) ** 8
        self.garbage_bytes = 0
        self.corrupted_chunks = 0

    def apply(self, chunk: bytes) -> tuple[bytes, bool]:
        """The bytes to put on the wire for ``chunk`` and whether ``chunk`` itself is intact."""
        cfg = self.config
        if cfg.ber == 0 and cfg.drop == 0 and cfg.garbage == 0:
            return chunk, True
        rng = self.rng
        prefix = b""
        if cfg.garbage > 0:
            # Expected garbage bytes per chunk = garbage/(1-garbage) × len(chunk): the garbage
            # fraction of all bytes on the wire is then `garbage`.
            expected = cfg.garbage / (1.0 - cfg.garbage) * len(chunk)
            bursts = expected / cfg.burst
            while bursts > 0:
                if rng.random() < min(1.0, bursts):
                    size = rng.randint(1, 2 * cfg.burst - 1)
                    prefix += rng.randbytes(size)
                bursts -= 1.0
            self.garbage_bytes += len(prefix)
        body = chunk
        intact = True
        if self._byte_error > 0 or cfg.drop > 0:
            out = bytearray()
            for byte in chunk:
                if cfg.drop > 0 and rng.random() < cfg.drop:
                    intact = False
                    continue
                if self._byte_error > 0 and rng.random() < self._byte_error:
                    byte ^= 1 << rng.randrange(8)
                    intact = False
                out.append(byte)
            body = bytes(out)
        if not intact:
            self.corrupted_chunks += 1
        return prefix + body, intact

    def next_unplug_in_s(self) -> float | None:
        """Device seconds until the next unplug, or None if the cable is never pulled."""
        if self.config.unplug_every_s <= 0:
            return None
        return self.rng.expovariate(1.0 / self.config.unplug_every_s)
