"""The agent's sources, one module per device kind; :func:`make_source` builds the one that the
device's entry in ``protocols.registry`` names."""

from __future__ import annotations

import threading
from collections.abc import Callable

from agent.config import DeviceConfig
from agent.sources.base import Sink, Source, SourceContext, StateHooks
from agent.timekeeper import TimeKeeper
from protocols import registry


def make_source(
    config: DeviceConfig,
    vehicle: str,
    sink: Sink,
    clock: TimeKeeper,
    stop: threading.Event,
    last_device_seq: Callable[[], int | None] | None = None,
    state: StateHooks | None = None,
    counted_doors: frozenset[int] = frozenset(),
) -> Source:
    """The source for a configured device, given what the agent gives every source.

    ``last_device_seq`` tells a source the last frame number captured from it (from the buffer),
    where the registrador's catch-up starts; ``state`` lets a source save its memory (the door
    counters' baselines, the registrador's catch-up floor) with its records and get it back;
    ``counted_doors`` are the doors an RS-485 counter reports (a CAN source leaves them alone).
    """
    context = SourceContext(vehicle, sink, clock, stop, last_device_seq or (lambda: None), state,
                            counted_doors)
    return source_class(config.protocol)(config, context)


def source_class(protocol: str) -> type[Source]:
    """The source class the device registry names for ``protocol`` (imported now)."""
    ref = registry.get(protocol).source
    if ref is None:
        raise ValueError(f"no source for protocol {protocol!r}")
    cls = registry.load(ref)
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise TypeError(f"{ref} (the source of {protocol!r}) is not a Source")
    return cls


__all__ = ["Sink", "Source", "SourceContext", "StateHooks", "make_source", "source_class"]
