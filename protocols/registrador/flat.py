"""Derives a ``struct.Struct`` from a fixed-layout construct ``Struct`` for the decoder's hot path.

construct's compiled parser reads a status payload at ≈ 40k/s, ``struct.unpack_from`` at
≈ 2.8M/s (measured on the project's 2-core machine, 2026-11). The decoder must keep up with ≥ 20k frames/s including record building, so
for the frames that arrive every second it unpacks with a ``struct.Struct`` *generated from the
construct definition* (this module) rather than a hand-written format string: the two cannot
drift apart, and a test checks both parse every vector identically. construct has no such
export, hence this small walker. Only the field kinds the registrador uses are supported.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from construct import Bytes as BytesField
from construct import (
    FixedSized,
    FormatField,
    NullStripped,
    Rebuild,
    Renamed,
    StringEncoded,
    Struct,
)


@dataclass(frozen=True)
class FlatLayout:
    """A struct format equivalent to a construct Struct, with the dotted name of each value."""

    struct: struct.Struct
    names: tuple[str, ...]
    strings: tuple[int, ...]
    """Indexes of values that are NUL-padded strings (unpacked as bytes; strip and decode)."""


def _walk(con: Any, prefix: str, fmt: list[str], names: list[str], strings: list[int]) -> None:
    if isinstance(con, Renamed | Rebuild):
        _walk(con.subcon, prefix, fmt, names, strings)
    elif isinstance(con, Struct):
        for sub in con.subcons:
            if sub.name is None:
                raise TypeError(f"flatten: unnamed field in {prefix or 'struct'}")
            nested = isinstance(_unrenamed(sub), Struct)
            _walk(sub, f"{prefix}{sub.name}{'.' if nested else ''}", fmt, names, strings)
    elif isinstance(con, FormatField):
        if not con.fmtstr.startswith(">"):
            raise TypeError(f"flatten: {prefix} is not big-endian ({con.fmtstr})")
        fmt.append(con.fmtstr[1:])
        names.append(prefix)
    elif (
        isinstance(con, StringEncoded)
        and isinstance(con.subcon, FixedSized)
        and isinstance(con.subcon.subcon, NullStripped)
        and isinstance(con.subcon.length, int)
    ):
        strings.append(len(names))
        fmt.append(f"{con.subcon.length}s")
        names.append(prefix)
    elif isinstance(con, BytesField) and isinstance(con.length, int):
        fmt.append(f"{con.length}s")
        names.append(prefix)
    else:
        raise TypeError(f"flatten: {prefix}: {type(con).__name__} has no fixed struct layout")


def _unrenamed(con: Any) -> Any:
    while isinstance(con, Renamed | Rebuild):
        con = con.subcon
    return con


def flatten(con: Any, stop: str | None = None) -> FlatLayout:
    """The struct layout of a fixed-size construct Struct (its top-level fields before ``stop``)."""
    if not isinstance(con, Struct):
        raise TypeError("flatten: needs a construct Struct")
    subcons = list(con.subcons)
    if stop is not None:
        subcons = subcons[: [s.name for s in subcons].index(stop)]
    fmt: list[str] = []
    names: list[str] = []
    strings: list[int] = []
    _walk(Struct(*subcons), "", fmt, names, strings)
    layout = struct.Struct(">" + "".join(fmt))
    return FlatLayout(layout, tuple(names), tuple(strings))
