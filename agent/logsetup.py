"""The agent's logging: stderr (journald under systemd) with rate limits per message source.

A noisy serial line (a loose connector producing garbage every millisecond) must not fill the SD
card: each logger/message template may log ``burst`` records per ``interval`` seconds; the rest are
counted and summarised once the interval ends ("suppressed N similar messages").
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable


class RateLimitFilter(logging.Filter):
    """Lets through at most ``burst`` records per (logger, template) in each ``interval``."""

    def __init__(
        self, burst: int = 10, interval: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Decide whether ``record`` is logged; annotate the first one after a suppression."""
        key = (record.name, str(record.msg))
        now = self._clock()
        start, count = self._windows.get(key, (now, 0))
        if now - start >= self.interval:
            suppressed = count - self.burst
            start, count = now, 0
            if suppressed > 0:
                record.msg = f"{record.msg} (suppressed {suppressed} similar messages)"
        count += 1
        self._windows[key] = (start, count)
        if len(self._windows) > 4096:  # bound memory: forget the oldest windows
            for old in sorted(self._windows, key=lambda k: self._windows[k][0])[:2048]:
                del self._windows[old]
        return count <= self.burst


def under_journald() -> bool:
    """True when stderr is connected to the journal (systemd sets JOURNAL_STREAM)."""
    return bool(os.environ.get("JOURNAL_STREAM"))


def configure(level: str = "INFO", burst: int = 10, interval: float = 60.0) -> None:
    """Log to stderr (journald adds its own timestamps) through the rate limiter."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not under_journald():
        fmt = "%(asctime)s " + fmt
    handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(RateLimitFilter(burst=burst, interval=interval))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
