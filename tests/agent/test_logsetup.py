"""The agent's rate-limited logging: a noisy line cannot fill the SD card."""

from __future__ import annotations

import logging

from agent.logsetup import RateLimitFilter


class FakeClock:
    """A settable monotonic clock (pure logic, no sleeping)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, name: str = "agent.sources.registrador") -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)


def test_burst_then_suppressed_then_summarised() -> None:
    clock = FakeClock()
    limiter = RateLimitFilter(burst=3, interval=60.0, clock=clock)
    passed = [limiter.filter(_record("CRC failure on %s")) for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    clock.now = 60.0
    first = _record("CRC failure on %s")
    assert limiter.filter(first)
    assert "(suppressed 7 similar messages)" in str(first.msg)


def test_templates_and_loggers_are_limited_separately() -> None:
    limiter = RateLimitFilter(burst=1, interval=60.0, clock=FakeClock())
    assert limiter.filter(_record("a"))
    assert not limiter.filter(_record("a"))
    assert limiter.filter(_record("b"))
    assert limiter.filter(_record("a", name="agent.uplink"))
