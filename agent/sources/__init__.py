"""The agent's sources, one module per device kind; :func:`make_source` picks one by protocol."""

from __future__ import annotations

import threading
from collections.abc import Callable

from agent.config import DeviceConfig
from agent.sources.base import Sink, Source, StateHooks
from agent.timekeeper import TimeKeeper


def make_source(
    config: DeviceConfig,
    vehicle: str,
    sink: Sink,
    clock: TimeKeeper,
    stop: threading.Event,
    last_device_seq: Callable[[], int | None] | None = None,
    state: StateHooks | None = None,
) -> Source:
    """The source for a configured device (registrador, nmea or apc).

    ``last_device_seq`` tells the registrador's source the last frame number captured from it
    (from the buffer), where its catch-up starts; ``state`` lets the door counters save their
    baselines with their records and get them back after a restart.
    """
    if config.protocol == "registrador":
        from agent.sources.registrador import RegistradorSource

        return RegistradorSource(config, vehicle, sink, clock, stop, last_device_seq, state)
    if config.protocol == "nmea":
        from agent.sources.gps import GpsSource

        return GpsSource(config, vehicle, sink, clock, stop)
    if config.protocol == "apc":
        from agent.sources.apc import ApcSource

        return ApcSource(config, vehicle, sink, clock, stop, state)
    raise ValueError(f"no source for protocol {config.protocol!r}")


__all__ = ["Sink", "Source", "StateHooks", "make_source"]
