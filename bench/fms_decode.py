"""FMS decode throughput against a fully loaded 250 kbit/s CAN bus (firmware-notes/fms.md §11).

    python -m bench.fms_decode [--seconds 60] [--repeat 5] [--compare]

The capture is ``--seconds`` of a bus carrying 1,908 frames/s — 250,000 bit/s ÷ 131 bits, the
length of a 29-bit identifier, 8-byte frame without stuffing (with worst-case stuffing it is 160
bits, 1,562 frames/s: the figure used is the more demanding one). Of these, per second: TCO1 20
(a drive that speeds up, slows down, stops; working states and cards change), TD 1, VDHR 1, DC1
1, DC2 10, CCVS1 10, a DI by BAM (5 frames) every 10 s; the rest are other parameter groups
(engine and others: ``foreign``). It is decoded by ``FmsDecoder`` (records built and dated) in
three forms: candump log text and SLCAN text (timestamps on) in 64 KiB reads (``frota decode``),
and as frames (the agent's path with python-can). The baseline, measured in the same run on the
same candump text: splitting lines and parsing identifier and data with ``int``/``bytes.fromhex``
only (no signals, no records). Each variant runs ``--repeat`` times, interleaved (one run of
each, round after round); printed: the median and the spread (min-max) of frames/s, the ratio of
the median to the bus rate (target ≥ 10×: a Pi 3 is several times slower than a development
machine) and to the baseline.

``--compare`` also measures what chose the description (firmware-notes/fms.md §2): TCO1 decoded
from the same DBC with cantools against construct ``BitStruct`` (interpreted and compiled).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from construct import BitsInteger, BitStruct, ByteSwapped, Padding

from protocols.fms import (
    CanFrame,
    FmsDecoder,
    Tco1,
    candump,
    encode_dc1,
    encode_dc2,
    encode_di,
    encode_tco1,
    encode_td,
    encode_vdhr,
    slcan,
    speed_code,
)
from protocols.fms.messages import BY_PGN, CCVS1, TCO1, encode_signals
from protocols.records import ts_to_ms

BITS_PER_FRAME = 131  # 29-bit id, 8 data bytes, no stuffing (worst-case stuffing: 160)
BUS_FPS = 250_000 / BITS_PER_FRAME
TARGET_BUS_X = 10.0
CHUNK = 64 * 1024


def bus_capture(seconds: int) -> list[CanFrame]:
    """``seconds`` of a fully loaded bus, frames evenly spaced, receive stamps from 1000.0 s."""
    t0 = ts_to_ms("2026-03-02T14:00:00Z")
    per_second = round(BUS_FPS)
    frames: list[CanFrame] = []
    for second in range(seconds):
        phase = second % 120
        kmh = min(phase, 60) * 1.5 if phase < 100 else 0.0  # up, cruise, stop for 20 s
        moving = kmh > 0
        state = Tco1(Driver1WorkingState=3 if moving else 2, Driver2WorkingState=1,
                     VehicleMotion=int(moving), Driver1Card=1, Driver2Card=int(second % 300 < 290),
                     TachographVehicleSpeed=speed_code(kmh), OutputShaftSpeed=int(kmh * 160))
        wanted: list[CanFrame] = [encode_td(t0 + second * 1000), encode_vdhr(1_000_000 + second * 20),
                                  encode_dc1(2 if moving else 0)]
        wanted += [encode_tco1(replace(state, TachographVehicleSpeed=speed_code(kmh + i / 100)
                                       if moving else 0)) for i in range(20)]
        wanted += [encode_dc2(not moving and i < 5, False) for i in range(10)]
        wanted += [CanFrame(None, 0x18FEF100, True, encode_signals(
            CCVS1, {"ParkingBrake": 0, "WheelBasedVehicleSpeed": speed_code(kmh)}))] * 10
        if second % 10 == 0:
            wanted += encode_di("04512345678", "04598765432" if second % 20 else "")
        fill = per_second - len(wanted)
        slots: list[CanFrame | None] = [None] * per_second
        for i, frame in enumerate(wanted):  # spread evenly over the second, in their order
            slots[i * per_second // len(wanted)] = frame
        other = 0
        for i, slot in enumerate(slots):
            if slot is None:
                other += 1
                slot = CanFrame(None, 0x0CF00400 + (other % 7 << 8), True,
                                bytes((second + other + k) & 0xFF for k in range(8)))
            frames.append(replace(slot, timestamp=1000.0 + second + i / per_second))
        assert other == fill
    return frames


def candump_text(frames: list[CanFrame]) -> bytes:
    return "".join(candump.format_line(f) + "\n" for f in frames).encode()


def slcan_text(frames: list[CanFrame]) -> bytes:
    return b"".join(slcan.encode_frame(f, timestamp_ms=round((f.timestamp or 0) * 1000))
                    for f in frames)


def text_run(data: bytes) -> Callable[[], int]:
    def run() -> int:
        decoder = FmsDecoder("BENCH")
        records = 0
        for i in range(0, len(data), CHUNK):
            records += len(decoder.feed(data[i : i + CHUNK]))
        records += len(decoder.finish())
        return decoder.stats.frames

    return run


def frames_run(frames: list[CanFrame]) -> Callable[[], int]:
    def run() -> int:
        decoder = FmsDecoder("BENCH")
        frame = decoder.frame
        for f in frames:
            frame(f)
        decoder.finish()
        return decoder.stats.frames

    return run


def baseline_run(data: bytes) -> Callable[[], int]:
    """The floor: lines split, identifier and data parsed, nothing decoded."""

    def run() -> int:
        count = 0
        for line in data.decode("ascii").splitlines():
            _, _, frame = line.split(" ")
            ident, _, payload = frame.partition("#")
            int(ident, 16)
            bytes.fromhex(payload)
            count += 1
        return count

    return run


def interleaved(runs: dict[str, Callable[[], int]], repeat: int) -> dict[str, tuple[list[float], int]]:
    """Each run ``repeat`` times, one of each per round: seconds per run and the count it gave."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    counts: dict[str, int] = {}
    for _ in range(repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            counts[name] = run()
            times[name].append(time.perf_counter() - start)
    return {name: (times[name], counts[name]) for name in runs}


def rates(seconds: list[float], count: int) -> tuple[float, float, float]:
    """Median, lowest and highest rate (count per second) over the runs."""
    per = sorted(count / s for s in seconds)
    return statistics.median(per), per[0], per[-1]


def compare(repeat: int, number: int = 20_000) -> None:
    """TCO1 from the DBC: cantools against construct BitStruct (the description's choice)."""
    message = BY_PGN[TCO1]
    data = encode_tco1(Tco1(Driver1WorkingState=3, Driver1Card=1, VehicleMotion=1,
                            TachographVehicleSpeed=speed_code(87.5))).data
    parts = []
    top = 64
    for signal in sorted(message.signals, key=lambda s: -s.start):
        if signal.start + signal.length < top:
            parts.append(Padding(top - signal.start - signal.length))
        parts.append(signal.name / BitsInteger(signal.length))
        top = signal.start
    if top:
        parts.append(Padding(top))
    # BitStruct reads bits from the most significant; byte-swapped, the 8 bytes are the
    # little-endian integer whose bit ``start`` the DBC counts from the least significant.
    bits = ByteSwapped(BitStruct(*parts))
    compiled = bits.compile()
    expected = message.decode(data, scaling=False, decode_choices=False)
    assert {k: bits.parse(data)[k] for k in expected} == expected
    assert {k: compiled.parse(data)[k] for k in expected} == expected

    def loop(fn: Callable[[], object]) -> Callable[[], int]:
        def run() -> int:
            for _ in range(number):
                fn()
            return number

        return run

    results = interleaved({
        "cantools (fms.dbc)": loop(lambda: message.decode(data, scaling=False, decode_choices=False)),
        "construct BitStruct": loop(lambda: bits.parse(data)),
        "construct compiled": loop(lambda: compiled.parse(data)),
    }, repeat)
    base = rates(*results["cantools (fms.dbc)"])[0]
    print(f"\nTCO1 decode, {number} frames per run, {repeat} interleaved runs each:")
    for name, (seconds, count) in results.items():
        median, low, high = rates(seconds, count)
        print(f"  {name:22s} {median:>10,.0f} frames/s  (spread {low:,.0f}-{high:,.0f})"
              f"  {median / base:5.2f}x cantools")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="seconds of bus traffic")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs of each (>= 3)")
    parser.add_argument("--compare", action="store_true",
                        help="also time cantools against construct on TCO1")
    args = parser.parse_args()
    repeat = max(3, args.repeat)
    frames = bus_capture(args.seconds)
    dump = candump_text(frames)
    text = slcan_text(frames)
    print(f"bus: {len(frames):,} frames in {args.seconds} s = {len(frames) / args.seconds:,.0f}/s "
          f"(250 kbit/s ÷ {BITS_PER_FRAME} bits; {250_000 / 160:,.0f}/s at worst-case stuffing)")
    results = interleaved({
        "candump text": text_run(dump),
        "SLCAN text": text_run(text),
        "frames (python-can path)": frames_run(frames),
        "baseline: split + int/fromhex": baseline_run(dump),
    }, repeat)
    base = rates(*results["baseline: split + int/fromhex"])[0]
    print(f"decode, {repeat} interleaved runs each (median, spread min-max):")
    for name, (seconds, count) in results.items():
        median, low, high = rates(seconds, count)
        print(f"  {name:30s} {median:>10,.0f} frames/s ({low:,.0f}-{high:,.0f})  "
              f"{median / BUS_FPS:6.1f}x bus (target >= {TARGET_BUS_X:.0f}x)  "
              f"{median / base:5.2f}x baseline")
    if args.compare:
        compare(repeat)


if __name__ == "__main__":
    main()
