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

from bench.common import best_run
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
    parser.add_argument("--repeat", type=int, default=3, help="runs per case, best kept (default 3)")
    args = parser.parse_args()
    print(f"line rate: 115200 baud 8N1 = {LINE_RATE:,.0f} bytes/s; "
          f"targets >= {TARGET_LINE_X:.0f}x line rate, >= {TARGET_FPS:,.0f} frames/s")
    ok = True
    for label, garbage in (("clean", 0.0), ("1% garbage", 0.01)):
        data, sent = simulated(args.seconds, garbage)
        base_s, base_frames = best_run(baseline_run(data), args.repeat)
        base_bps = len(data) / base_s
        print(f"{label}: {len(data):,} bytes, {sent:,} frames; baseline struct.unpack_from "
              f"{base_bps:,.0f} bytes/s, {base_frames / base_s:,.0f} frames/s")
        for chunk in (4096, 64):
            seconds, frames = best_run(decoder_run(data, chunk), args.repeat)
            bps, fps = len(data) / seconds, frames / seconds
            line_x = bps / LINE_RATE
            ok = ok and line_x >= TARGET_LINE_X and fps >= TARGET_FPS and frames == sent
            print(f"  decoder, {chunk:>4}-byte reads: {bps:>11,.0f} bytes/s = {line_x:,.0f}x line "
                  f"rate; {fps:>8,.0f} frames/s ({frames:,} of {sent:,}); "
                  f"{bps / base_bps:.2f}x baseline")
    print("targets met" if ok else "TARGETS MISSED")


if __name__ == "__main__":
    main()
