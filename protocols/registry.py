"""Protocols by name, for ``frota decode`` and the agent's sources (loaded by name, like python-can).

Each wire-format module registers a factory that builds a fresh decoder for one vehicle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from protocols.base import Decoder


@dataclass(frozen=True)
class ProtocolInfo:
    """A registered wire format: its name, a decoder factory and its firmware note."""

    name: str
    make_decoder: Callable[[str], Decoder]
    firmware_note: str
    description: str


#: name -> module that defines ``PROTOCOL: ProtocolInfo``; imported on first use.
_MODULES: dict[str, str] = {
    "registrador": "protocols.registrador",
    "nmea": "protocols.nmea",
    "apc": "protocols.apc",
    "fms": "protocols.fms",
}


def names() -> list[str]:
    """The registered protocol names, sorted."""
    return sorted(_MODULES)


def get(name: str) -> ProtocolInfo:
    """The protocol registered under ``name``; KeyError if there is none."""
    module = importlib.import_module(_MODULES[name])
    info: ProtocolInfo = module.PROTOCOL
    return info
