"""Registrador decode throughput: bytes/s and frames/s against the line rate and a struct baseline.

    python -m bench.registrador_decode [--seconds 28800] [--repeat 3]

The capture is ``--seconds`` of the registrador simulator playing its default drive (status at
1 Hz plus driver, console and device events): an 8-hour day by default. It is decoded by
:class:`protocols.registrador.RegistradorDecoder` (canonical records, validated layout, state
tracking) in 4 KiB reads and in 64-byte reads, clean and with 1 % garbage. Printed: bytes/s,
frames/s, the ratio to the serial line rate (115200 baud 8N1 = 11,520 bytes/s), and the ratio
to a baseline measured in the same run on the same bytes: a plain ``struct.unpack_from`` decoder
(sync hunt, CRC, header and status payload into a dict; no records). Targets: ≥ 100x the line
rate and ≥ 20,000 frames/s on one core.
"""

from __future__ import annotations

import argparse
import binascii
import struct
from collections.abc import Callable

from bench.common import add_repeat, host_line, interleaved
from protocols.records import ts_to_ms
from protocols.registrador import RegistradorDecoder
from simulators.noise import Noise, NoiseConfig
from simulators.registrador import DefaultDrive, RegistradorModel

LINE_RATE = 115_200 / 10  # bytes/s at 8N1
TARGET_LINE_X = 100.0
TARGET_FPS = 20_000.0

_HEAD = struct.Struct(">BBIQ")
_STATUS = struct.Struct(">HIB16sB16sB")


def simulated(seconds: int, garbage: float) -> tuple[bytes, int]:
    """``seconds`` of the simulator's default drive as wire bytes, and how many frames it holds."""
    t0 = ts_to_ms("2026-03-02T14:00:00Z")
    model = RegistradorModel(t0)
    drive = DefaultDrive(model, t0)
    noise = Noise(NoiseConfig(garbage=garbage, seed=1))
    out = bytearray()
    frames = 0
    for second in range(seconds):
        now = t0 + second * 1000
        drive.step(now)
        for emission in model.due(now):
            wire, _ = noise.apply(emission.data)
            out += wire
            frames += 1
    return bytes(out), frames


def decoder_run(data: bytes, chunk: int) -> Callable[[], int]:
    """A run of the decoder over ``data`` in reads of ``chunk`` bytes; returns frames decoded."""

    def run() -> int:
        decoder = RegistradorDecoder("BENCH")
        for i in range(0, len(data), chunk):
            decoder.feed(data[i : i + chunk])
        decoder.finish()
        return decoder.stats.frames

    return run


def baseline_run(data: bytes) -> Callable[[], int]:
    """The floor: find AA 55, check the CRC, struct.unpack_from header and status into a dict."""

    def run() -> int:
        frames = 0
        pos = 0
        end = len(data)
        crc = binascii.crc_hqx
        while True:
            start = data.find(b"\xaa\x55", pos)
            if start < 0 or start + 18 > end:
                return frames
            length = data[start + 2]
            stop = start + 18 + length
            if stop > end or crc(data[start + 2 : stop - 2], 0xFFFF) != int.from_bytes(
                data[stop - 2 : stop], "big"
            ):
                pos = start + 1
                continue
            _, kind, seq, clock = _HEAD.unpack_from(data, start + 2)
            fields = {"type": kind, "seq": seq, "clock": clock}
            if kind == 1:
                speed, odometer, flags, card1, act1, card2, act2 = _STATUS.unpack_from(
                    data, start + 16
                )
                fields.update(speed=speed, odometer=odometer, flags=flags, card1=card1,
                              act1=act1, card2=card2, act2=act2)
            frames += 1
            pos = stop

    return run


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=int, default=28_800, help="simulated seconds (default 28800, 8 hours)"
    )
    add_repeat(parser)
    args = parser.parse_args()
    print(f"line rate: 115200 baud 8N1 = {LINE_RATE:,.0f} bytes/s; "
          f"targets >= {TARGET_LINE_X:.0f}x line rate, >= {TARGET_FPS:,.0f} frames/s; "
          f"{args.repeat} interleaved repeats, median (spread)")
    ok = True
    for label, garbage in (("clean", 0.0), ("1% garbage", 0.01)):
        data, sent = simulated(args.seconds, garbage)
        seconds, frames = interleaved({
            "baseline": baseline_run(data),
            **{f"{chunk}": decoder_run(data, chunk) for chunk in (4096, 64)},
        }, args.repeat)
        base_bps = seconds["baseline"].per(len(data))
        base_fps = seconds["baseline"].per(float(str(frames["baseline"])))
        print(f"{label}: {len(data):,} bytes, {sent:,} frames; baseline struct.unpack_from "
              f"{base_bps.show()} bytes/s, {base_fps.show()} frames/s")
        for chunk in (4096, 64):
            got = int(str(frames[f"{chunk}"]))
            bps, fps = seconds[f"{chunk}"].per(len(data)), seconds[f"{chunk}"].per(got)
            line_x = bps.scaled(1 / LINE_RATE)
            met = line_x.median >= TARGET_LINE_X and fps.median >= TARGET_FPS and got == sent
            ok = ok and met
            print(f"  decoder, {chunk:>4}-byte reads: {bps.show()} bytes/s = "
                  f"{line_x.median:,.0f}x line rate (target >= {TARGET_LINE_X:.0f}x); "
                  f"{fps.show()} frames/s (target >= {TARGET_FPS:,.0f}; {got:,} of {sent:,}); "
                  f"{bps.ratio(base_bps).show('{:.2f}')}x baseline")
    print("targets met (medians)" if ok else "TARGETS MISSED (medians)")
    print(host_line())


if __name__ == "__main__":
    main()
