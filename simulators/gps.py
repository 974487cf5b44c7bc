"""A simulated GPS receiver: NMEA 0183 at 1 Hz along a route (``frota sim gps``).

The model is two pure parts — :func:`epoch_sentences` (a fix and a device time → the RMC, VTG
and GGA sentences, rendered by pynmea2 with their checksums) and a motion source (a callable
giving the fix at a device time; :class:`RouteDriver` drives a polyline with stops) — joined by
:class:`GpsReceiver`, a :class:`simulators.runner.DeviceModel` that the shared runner puts on a
pseudo-terminal with its noise and scaled clock. Scenario players can pass their own motion.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pynmea2

from protocols.nmea import KNOT_KMH
from simulators.cli import add_line_arguments, serve
from simulators.clock import ScaledClock
from simulators.errors import SimulatorError
from simulators.runner import Emission
from simulators.scenario.geo import Polyline

#: Terminal Tietê (São Paulo) → Jundiaí along the Bandeirantes, roughly: the default route.
DEFAULT_ROUTE: tuple[tuple[float, float], ...] = (
    (-23.5163, -46.6252),
    (-23.4930, -46.6890),
    (-23.4105, -46.7640),
    (-23.3060, -46.8330),
    (-23.1860, -46.8970),
)
EPOCH_MS = 1000


@dataclass(frozen=True)
class GpsFix:
    """What the receiver knows at one epoch; ``valid`` false gives void sentences."""

    lat: float
    lon: float
    kmh: float = 0.0
    course: float | None = None
    valid: bool = True
    satellites: int = 9


def _angle(value: float, degree_digits: int) -> str:
    """Signed degrees → NMEA ``d…dmm.mmmmm`` (minutes to 1e-5, about 2 cm)."""
    minutes = round(abs(value) * 60, 5)
    degrees, minutes = divmod(minutes, 60)
    return f"{int(degrees):0{degree_digits}d}{minutes:08.5f}"


def epoch_sentences(
    now_ms: int, fix: GpsFix, *, talker: str = "GP", vtg: bool = True
) -> list[bytes]:
    """One fix epoch as sentences (RMC, VTG, GGA — u-blox order), each ending in CR LF."""
    dt = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    hms = f"{dt:%H%M%S}.{dt.microsecond // 10_000:02d}"
    date = f"{dt:%d%m%y}"
    if fix.valid:
        lat = (_angle(fix.lat, 2), "N" if fix.lat >= 0 else "S")
        lon = (_angle(fix.lon, 3), "E" if fix.lon >= 0 else "W")
        knots = f"{fix.kmh / KNOT_KMH:.3f}"
        course = "" if fix.course is None else f"{fix.course:.1f}"
        rmc = (hms, "A", *lat, *lon, knots, course, date, "", "", "A")
        vtg_fields = (course, "T", "", "M", knots, "N", f"{fix.kmh:.1f}", "K", "A")
        gga = (hms, *lat, *lon, "1", f"{fix.satellites:02d}", "0.9", "760.0", "M", "-5.6", "M",
               "", "")
    else:
        rmc = (hms, "V", "", "", "", "", "", "", date, "", "", "N")
        vtg_fields = ("", "T", "", "M", "", "N", "", "K", "N")
        gga = (hms, "", "", "", "", "0", "00", "99.9", "", "M", "", "M", "", "")
    sentences = [pynmea2.RMC(talker, "RMC", rmc)]
    if vtg:
        sentences.append(pynmea2.VTG(talker, "VTG", vtg_fields))
    sentences.append(pynmea2.GGA(talker, "GGA", gga))
    return [s.render(checksum=True, dollar=True, newline=True).encode("ascii") for s in sentences]


class RouteDriver:
    """Drives a polyline back and forth at a cruising speed, stopping now and then; optional
    void spells (a tunnel) where the receiver has no fix."""

    def __init__(
        self,
        start_ms: int,
        route: Sequence[tuple[float, float]] = DEFAULT_ROUTE,
        kmh: float = 80.0,
        stop_every_s: float = 0.0,
        stop_for_s: float = 30.0,
        void_every_s: float = 0.0,
        void_for_s: float = 10.0,
    ) -> None:
        self.line = Polyline(list(route))
        self.start_ms = start_ms
        self.kmh = kmh
        self.stop_every_s, self.stop_for_s = stop_every_s, stop_for_s
        self.void_every_s, self.void_for_s = void_every_s, void_for_s

    def _moving_s(self, t_s: float) -> float:
        """Seconds spent moving in the first ``t_s`` seconds (stops are at the period's end)."""
        if self.stop_every_s <= 0:
            return t_s
        period = self.stop_every_s + self.stop_for_s
        whole, part = divmod(t_s, period)
        return whole * self.stop_every_s + min(part, self.stop_every_s)

    def __call__(self, now_ms: int) -> GpsFix:
        """The fix at device time ``now_ms``."""
        t_s = max(0.0, (now_ms - self.start_ms) / 1000)
        moving = self.stop_every_s <= 0 or t_s % (self.stop_every_s + self.stop_for_s) < self.stop_every_s
        distance = self._moving_s(t_s) * self.kmh / 3.6
        length = self.line.length_m
        lap, along = divmod(distance, length)
        backwards = int(lap) % 2 == 1
        lat, lon, course = self.line.locate(length - along if backwards else along)
        if backwards:
            course = (course + 180.0) % 360.0
        valid = self.void_every_s <= 0 or t_s % (self.void_every_s + self.void_for_s) < self.void_every_s
        kmh = self.kmh if moving else 0.0
        return GpsFix(lat, lon, kmh, course if moving else None, valid)


class GpsReceiver:
    """The GPS as a runner device model: one epoch per device second, no input taken."""

    name = "gps"

    def __init__(
        self,
        start_ms: int,
        motion: Callable[[int], GpsFix],
        *,
        talker: str = "GP",
        vtg: bool = True,
    ) -> None:
        self.motion = motion
        self.talker = talker
        self.vtg = vtg
        self.next_ms = (start_ms // EPOCH_MS + 1) * EPOCH_MS  # fixes fall on whole seconds
        self.epochs = 0

    def next_due_ms(self) -> int | None:
        """Device time of the next fix epoch."""
        return self.next_ms

    def due(self, now_ms: int) -> list[Emission]:
        """Every epoch up to ``now_ms``, one emission per sentence (so noise hits sentences)."""
        out: list[Emission] = []
        while self.next_ms <= now_ms:
            self.epochs += 1
            fix = self.motion(self.next_ms)
            for sentence in epoch_sentences(self.next_ms, fix, talker=self.talker, vtg=self.vtg):
                out.append(Emission(sentence, self.epochs))
            self.next_ms += EPOCH_MS
        return out

    def receive(self, data: bytes, now_ms: int) -> list[Emission]:
        """Configuration sentences from the host are ignored, as most receivers do by default."""
        return []


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim gps``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "gps",
        help="a GPS receiver: NMEA 0183 (RMC, VTG, GGA) at 1 Hz along a route",
        description="A GPS receiver on a pseudo-terminal: one fix per device second as RMC, "
        "VTG and GGA sentences with correct checksums, driving a route (default: São Paulo "
        "to Jundiaí) back and forth, with optional stops and no-fix spells. Prints the tty "
        "path on stdout. At 9600 baud a second of sentences is about 200 bytes, so time "
        "scales above about 4 need --baud 0 (unpaced).",
    )
    parser.add_argument("--kmh", type=float, default=80.0, help="cruising speed (default 80)")
    parser.add_argument("--talker", default="GP", choices=["GP", "GN", "GL", "GA", "BD"],
                        help="talker id of the sentences (default GP)")
    parser.add_argument("--no-vtg", action="store_true", help="send RMC and GGA only")
    parser.add_argument("--stop-every", type=float, default=0.0, metavar="SECONDS",
                        help="stop after this many seconds of driving (default 0 = never)")
    parser.add_argument("--stop-for", type=float, default=30.0, metavar="SECONDS",
                        help="length of each stop (default 30)")
    parser.add_argument("--void-every", type=float, default=0.0, metavar="SECONDS",
                        help="lose the fix after this many seconds (default 0 = never)")
    parser.add_argument("--void-for", type=float, default=10.0, metavar="SECONDS",
                        help="length of each no-fix spell (default 10)")
    add_line_arguments(parser, baud=9600)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve the GPS on a pty until interrupted or --duration."""
    if args.kmh < 0 or args.stop_every < 0 or args.void_every < 0:
        raise SimulatorError("--kmh, --stop-every and --void-every must be >= 0")

    def make(clock: ScaledClock) -> GpsReceiver:
        start = clock.now_ms()
        driver = RouteDriver(start, kmh=args.kmh, stop_every_s=args.stop_every,
                             stop_for_s=args.stop_for, void_every_s=args.void_every,
                             void_for_s=args.void_for)
        return GpsReceiver(start, driver, talker=args.talker, vtg=not args.no_vtg)

    return serve(args, make)
