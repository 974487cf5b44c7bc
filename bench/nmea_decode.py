"""NMEA decode throughput as a multiple of the GPS line rate.

    python -m bench.nmea_decode [--seconds 3600] [--repeat 3]

Two captures: an hour of the GPS simulator (RMC, VTG, GGA plus the GSA and GSV a real receiver
adds, about 430 bytes a second — more than a 4800-baud line carries, as at 9600 baud) and every
capture of gpsd's corpus concatenated (many receivers, marine and AIS noise), if present. Each is
fed to :class:`protocols.nmea.NmeaDecoder` in 4 KiB reads and in 16-byte reads (a serial port
read as bytes trickle in). Printed: bytes/s, the ratio to 4800 and 9600 baud (480 and 960
bytes/s), and the ratio to a baseline measured in the same run: splitting the lines and letting
pynmea2 parse each with its checksum checked (the library alone, no records).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pynmea2

from bench.common import add_repeat, host_line, interleaved
from protocols.nmea import NmeaDecoder
from protocols.records import ts_to_ms
from simulators.gps import GpsReceiver, RouteDriver

LINE_RATES = {"4800 baud": 480.0, "9600 baud": 960.0}
GSA = b"$GPGSA,A,3,04,05,09,12,24,25,29,31,,,,,1.8,0.9,1.5*3B\r\n"
GSV = (
    b"$GPGSV,3,1,11,04,51,060,44,05,25,312,40,09,10,140,31,12,70,204,45*7C\r\n"
    b"$GPGSV,3,2,11,24,15,044,38,25,48,259,42,29,33,302,41,31,05,180,29*7F\r\n"
    b"$GPGSV,3,3,11,02,03,090,,10,01,320,,26,02,012,*48\r\n"
)
CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora" / "nmea" / "gpsd"


def simulated(seconds: int) -> bytes:
    """``seconds`` of the GPS simulator with a receiver's usual GSA/GSV lines."""
    t0 = ts_to_ms("2026-03-02T14:00:00Z")
    receiver = GpsReceiver(t0 - 1, RouteDriver(t0, stop_every_s=300, stop_for_s=40))
    out = bytearray()
    for second in range(seconds):
        out += b"".join(e.data for e in receiver.due(t0 + second * 1000))
        out += GSA + GSV
    return bytes(out)


def decoder_run(data: bytes, chunk: int) -> Callable[[], int]:
    """A run of the decoder over ``data`` in reads of ``chunk`` bytes; returns records made."""

    def run() -> int:
        decoder = NmeaDecoder("BENCH")
        made = 0
        for i in range(0, len(data), chunk):
            made += len(decoder.feed(data[i : i + chunk]))
        return made + len(decoder.finish())

    return run


def baseline_run(data: bytes) -> Callable[[], int]:
    """The library floor: split lines, pynmea2.parse(check=True) each; no records built."""
    lines = data.split(b"\n")

    def run() -> int:
        parsed = 0
        for line in lines:
            try:
                pynmea2.parse(line.decode("ascii", "replace"), check=True)
                parsed += 1
            except (pynmea2.ParseError, ValueError, TypeError, AttributeError):
                pass
        return parsed

    return run


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=3600, help="simulated seconds (default 3600)")
    add_repeat(parser)
    args = parser.parse_args()
    captures = {"simulator": simulated(args.seconds)}
    if CORPUS.is_dir():
        captures["gpsd corpus"] = b"".join(p.read_bytes() for p in sorted(CORPUS.glob("*.log")))
    print(f"{args.repeat} interleaved repeats of each case, median (spread); no target set by an "
          "issue beyond keeping up with the line")
    for name, data in captures.items():
        seconds, _ = interleaved({
            "baseline": baseline_run(data),
            **{f"{chunk}": decoder_run(data, chunk) for chunk in (4096, 16)},
        }, args.repeat)
        base = seconds["baseline"].per(len(data))
        print(f"{name}: {len(data):,} bytes; baseline pynmea2.parse {base.show()} bytes/s")
        for chunk in (4096, 16):
            rate = seconds[f"{chunk}"].per(len(data))
            ratios = ", ".join(f"{rate.median / bps:,.0f}x {line}" for line, bps in LINE_RATES.items())
            print(f"  decoder, {chunk:>4}-byte reads: {rate.show()} bytes/s = {ratios} (median); "
                  f"{rate.ratio(base).show('{:.2f}')}x baseline")
    print(host_line())


if __name__ == "__main__":
    main()
