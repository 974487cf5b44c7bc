"""A toy device added through the device registry's seam alone: this one module plus one entry.

tests/test_device_registry.py registers it the way a separate package would, with a
``frota.devices`` entry point naming :data:`DEVICE` (``toy = "tests.toy_device:DEVICE"``), and runs
it end to end: ``frota decode --protocol toy``, ``frota sim toy`` on a pty and ``frota agent run``
reading that pty with the generic stream source. Nothing else in Frota is edited for it.

Its wire format: ASCII lines ``TOY,<ms since the Unix epoch>,<km/h>`` ending in ``\\n``; the
device has a clock (the ms field), and each line is one ``speed`` record. Any other line is
counted as malformed and skipped.
"""

from __future__ import annotations

import argparse
from typing import Any

from protocols.base import DecoderStats
from protocols.records import Record, make_record, ms_to_ts
from protocols.registry import DeviceEntry
from simulators.cli import add_line_arguments, serve
from simulators.clock import ScaledClock
from simulators.runner import Emission

#: The registry entry: the decoder, the agent's generic stream source and the simulator below.
DEVICE = DeviceEntry(
    name="toy",
    device="toy",
    clocked=True,
    decoder="tests.toy_device:ToyDecoder",
    firmware_note="toy.md",
    description="a toy speedometer: ASCII lines TOY,<ms>,<km/h>",
    source="agent.sources.stream:StreamSource",
    simulator="tests.toy_device",
)

#: The longest line kept while waiting for its end.
MAX_LINE = 64


class ToyDecoder:
    """``TOY,<ms>,<kmh>`` lines → ``speed`` records; never raises on wire data."""

    def __init__(self, vehicle: str) -> None:
        self.vehicle = vehicle
        self.stats = DecoderStats()
        self._buf = b""

    def feed(self, data: bytes) -> list[Record]:
        """Consume bytes; return the records of the lines they complete."""
        self.stats.bytes_in += len(data)
        *lines, rest = (self._buf + data).split(b"\n")
        if len(rest) > MAX_LINE:
            self.stats.bytes_dropped += len(rest)
            rest = b""
        self._buf = rest
        out: list[Record] = []
        for line in lines:
            self._line(line, out)
        return out

    def finish(self) -> list[Record]:
        """End of input: an unterminated line is dropped."""
        self.stats.bytes_dropped += len(self._buf)
        self._buf = b""
        return []

    def set_time(self, ts_ms: int) -> None:
        """The clock hook: unused, every line carries the device's time."""

    def _line(self, line: bytes, out: list[Record]) -> None:
        parts = line.strip().split(b",")
        try:
            if len(parts) != 3 or parts[0] != b"TOY":
                raise ValueError("not a TOY line")
            ms, kmh = int(parts[1]), float(parts[2])
            if not 0 <= kmh < 300 or not 0 < ms < 2**42:
                raise ValueError("out of range")
        except ValueError:
            self.stats.malformed += 1
            self.stats.bytes_dropped += len(line) + 1
            self.stats.reject("malformed", line)
            return
        self.stats.frames += 1
        out.append(make_record("speed", self.vehicle, ms_to_ts(ms), kmh=kmh, raw=(line + b"\n").hex()))


class ToyModel:
    """The toy device for the simulators' runner: one line per device second at a steady speed."""

    name = "toy"

    def __init__(self, start_ms: int, kmh: float) -> None:
        self.kmh = kmh
        self.next_ms = (start_ms // 1000 + 1) * 1000

    def next_due_ms(self) -> int | None:
        """Device time of the next line."""
        return self.next_ms

    def due(self, now_ms: int) -> list[Emission]:
        """Every line due up to ``now_ms``."""
        out: list[Emission] = []
        while self.next_ms <= now_ms:
            out.append(Emission(f"TOY,{self.next_ms},{self.kmh:.1f}\n".encode(), self.next_ms))
            self.next_ms += 1000
        return out

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """The toy takes no requests."""
        return []


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim toy``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "toy", help=DEVICE.description, description="The toy device on a pseudo-terminal."
    )
    parser.add_argument("--kmh", type=float, default=42.0, help="its speed (default 42)")
    add_line_arguments(parser, baud=0)
    parser.set_defaults(func=lambda args: serve(args, lambda clock: _model(clock, args.kmh)))


def _model(clock: ScaledClock, kmh: float) -> ToyModel:
    return ToyModel(clock.now_ms(), kmh)
