"""The device registry: one entry per device protocol, from which every other list derives.

Modelled on python-can's ``BACKENDS`` (``can/interfaces/__init__.py``): a dict name → entry whose
code is named as ``"module:attribute"`` strings and imported on first use, so listing the devices
imports nothing. An entry says everything the rest of Frota needs to know about a device:

- ``frota decode --protocol`` offers :func:`names` and builds decoders with
  :meth:`DeviceEntry.make_decoder`;
- the records' ``device`` values (``protocols.records.DEVICES``) are :func:`device_names`;
- the agent's ``protocol`` key accepts :func:`source_protocols` and builds the entry's ``source``;
- ``frota sim`` adds each entry's ``simulator`` module (its ``register_sim(subparsers)``).

Adding a device = its decoder module (and a source or simulator module if it needs its own) plus
one entry in :data:`BUILTIN`. A separate package adds one without editing Frota: it declares a
``frota.devices`` entry point naming a :class:`DeviceEntry` (``toy = "toy_device:DEVICE"``), as
python-can's plugins declare ``can.interface``.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:  # only for types: protocols.base imports protocols.records, which imports us
    from protocols.base import Decoder

log = logging.getLogger(__name__)

#: The entry-point group through which other packages register devices.
ENTRY_POINT_GROUP = "frota.devices"


@dataclass(frozen=True)
class DeviceEntry:
    """A device protocol: what it is called, whether it has a clock and where its code lives."""

    #: The protocol's name (``frota decode --protocol``, the agent's ``protocol`` key).
    name: str
    #: The records' ``device`` value for this device (its health records, its events).
    device: str
    #: True when the device stamps its records with its own clock; False when the caller
    #: supplies the time through the decoder's clock hook (``Decoder.set_time``).
    clocked: bool
    #: ``"module:Class"`` of the decoder; ``Class(vehicle)`` makes a fresh one.
    decoder: str
    #: The page in ``firmware-notes/`` that describes the wire format.
    firmware_note: str
    #: One line for ``--help`` texts.
    description: str
    #: ``"module:Class"`` of the agent's source (an ``agent.sources.base.Source``), or None.
    source: str | None = None
    #: The module that adds ``frota sim <device>`` (its ``register_sim(subparsers)``), or None.
    simulator: str | None = None

    def make_decoder(self, vehicle: str) -> Decoder:
        """A fresh decoder for one vehicle."""
        decoder: Decoder = load(self.decoder)(vehicle)
        return decoder


def load(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (imported now)."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


#: The devices Frota ships, in the order help texts list them.
BUILTIN: dict[str, DeviceEntry] = {
    entry.name: entry
    for entry in (
        DeviceEntry(
            name="registrador",
            device="registrador",
            clocked=True,
            decoder="protocols.registrador.decoder:RegistradorDecoder",
            firmware_note="registrador.md",
            description="the tachograph's binary serial protocol (115200 8N1, "
            "CRC-16/IBM-3740 frames)",
            source="agent.sources.registrador:RegistradorSource",
            simulator="simulators.registrador",
        ),
        DeviceEntry(
            name="nmea",
            device="gps",
            clocked=True,
            decoder="protocols.nmea:NmeaDecoder",
            firmware_note="nmea.md",
            description="GPS receiver, NMEA 0183 (RMC, GGA, VTG) at 4800/9600 baud",
            source="agent.sources.stream:StreamSource",
            simulator="simulators.gps",
        ),
        DeviceEntry(
            name="apc",
            device="apc",
            clocked=False,
            decoder="protocols.apc.decoder:ApcDecoder",
            firmware_note="apc.md",
            description="door passenger counters, APC-485 (polled, 19200 8N1, CRC-16/IBM-3740)",
            source="agent.sources.apc:ApcSource",
            simulator="simulators.apc",
        ),
        DeviceEntry(
            name="fms",
            device="registrador",  # the tachograph, read on the FMS CAN bus instead of its serial line
            clocked=True,  # dated by the tachograph's TD message
            decoder="protocols.fms.decoder:FmsDecoder",
            firmware_note="fms.md",
            description="FMS-Standard on CAN (J1939, 250 kbit/s): candump logs or SLCAN text",
            source="agent.sources.fms:FmsSource",
            simulator="simulators.fms",
        ),
    )
}


@functools.cache
def entries() -> dict[str, DeviceEntry]:
    """Every registered device: the built-in ones, then those of installed plugins."""
    found = dict(BUILTIN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry = point.load()
        except Exception:  # a broken plugin must not stop Frota; it is named in the log
            log.warning("device plugin %s (%s) does not load", point.name, point.value, exc_info=True)
            continue
        if not isinstance(entry, DeviceEntry):
            log.warning("device plugin %s names %r, not a DeviceEntry", point.name, entry)
        elif entry.name in found:
            log.warning("device plugin %s: protocol %r is already registered", point.name, entry.name)
        else:
            found[entry.name] = entry
    return found


def names() -> list[str]:
    """The registered protocol names, sorted."""
    return sorted(entries())


def get(name: str) -> DeviceEntry:
    """The device registered under the protocol ``name``; KeyError if there is none."""
    return entries()[name]


def device_names() -> tuple[str, ...]:
    """The records' ``device`` values of the registered devices, in registry order, once each."""
    return tuple(dict.fromkeys(entry.device for entry in entries().values()))


def source_protocols() -> list[str]:
    """The protocols the agent can read (those with a source), sorted."""
    return sorted(name for name, entry in entries().items() if entry.source is not None)


def simulator_modules() -> list[str]:
    """The modules that add ``frota sim <device>``, in registry order."""
    return [entry.simulator for entry in entries().values() if entry.simulator is not None]


class DeviceValues(Sequence[str]):
    """The records' ``device`` values — each registered device's, then ``extra`` — as a sequence
    read from the registry when first used, not when it is made: ``protocols.records`` holds one
    from its import on, and a plugin's module may import ``protocols.records`` when it loads."""

    def __init__(self, *extra: str) -> None:
        self._extra = extra

    def _values(self) -> tuple[str, ...]:
        return (*device_names(), *self._extra)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._values()[index]

    def __len__(self) -> int:
        return len(self._values())

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __contains__(self, value: object) -> bool:
        return value in self._values()

    def __eq__(self, other: object) -> bool:
        return self._values() == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return repr(self._values())
