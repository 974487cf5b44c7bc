"""APC-485 decode throughput as a multiple of the RS-485 line rate.

    python -m bench.apc_decode [--polls 20000] [--repeat 3]

The capture is what a bus logger sees on the door-counter line: the agent polling four heads in
turn (a 6-byte READ_COUNTS, a 12-byte COUNTS answer), doors opening and closing, passengers
passing, an ACK_RESET now and then, a little line noise. It is fed to
:class:`protocols.apc.ApcDecoder` one poll at a time (request + answer, as the agent feeds it)
and in 4 KiB reads (a logged capture). Printed: bytes/s, the ratio to 19200 baud (1,920
bytes/s), and the ratio to a baseline measured in the same run: walking the same frames with
their CRC checked by ``binascii.crc_hqx`` and the COUNTS parsed by the compiled Struct alone.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

from bench.common import add_repeat, host_line, interleaved
from protocols.apc import ApcDecoder, DoorCounts, encode_ack, encode_counts, encode_request
from protocols.apc.frames import ACK_RESET, COUNTS_COMPILED, crc16

LINE_RATE = 1920.0  # 19200 baud, 8N1
HEADS = 4


def capture(polls: int, seed: int = 1) -> list[bytes]:
    """``polls`` request+answer exchanges, round robin over the heads, with stops and noise."""
    rng = random.Random(seed)
    entered = [0] * HEADS
    exited = [0] * HEADS
    exchanges: list[bytes] = []
    for n in range(polls):
        head = n % HEADS
        address = head + 1
        open_ = (n // 400) % 5 == 4  # one poll round in five hundred is a stop
        if open_ and rng.random() < 0.3:
            entered[head] += 1
        if open_ and rng.random() < 0.2:
            exited[head] += 1
        counts = DoorCounts(open_, entered[head], exited[head], resets=0)
        exchange = encode_request(address) + encode_counts(address, counts)
        if n % 5000 == 0:
            exchange += encode_request(address, ACK_RESET) + encode_ack(address)
        if rng.random() < 0.001:
            exchange = bytes([rng.randrange(256)]) + exchange  # a glitch on the line
        exchanges.append(exchange)
    return exchanges


def decoder_run(chunks: list[bytes]) -> Callable[[], int]:
    """The decoder over the capture, one chunk per feed; returns records made."""

    def run() -> int:
        decoder = ApcDecoder("BENCH")
        made = 0
        for i, chunk in enumerate(chunks):
            made += len(decoder.feed(chunk, 1_772_460_000_000 + i * 60))
        return made + len(decoder.finish())

    return run


def baseline_run(chunks: list[bytes]) -> Callable[[], int]:
    """The floor: the same frames cut at known offsets, CRC checked, COUNTS parsed."""
    frames = []
    for chunk in chunks:
        pos = chunk.find(b"\xa5")
        while 0 <= pos < len(chunk) - 5:
            size = 6 + chunk[pos + 3]
            frames.append(chunk[pos : pos + size])
            pos += size
    parse = COUNTS_COMPILED.parse

    def run() -> int:
        good = 0
        for frame in frames:
            if crc16(frame[1:-2]) == int.from_bytes(frame[-2:], "big"):
                if frame[2] == 0x81:
                    parse(frame[4:-2])
                good += 1
        return good

    return run


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=20_000, help="exchanges (default 20000)")
    add_repeat(parser)
    args = parser.parse_args()
    exchanges = capture(args.polls)
    data = b"".join(exchanges)
    reads = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    seconds, _ = interleaved({
        "baseline": baseline_run(exchanges),
        "one poll per feed": decoder_run(exchanges),
        "4 KiB reads": decoder_run(reads),
    }, args.repeat)
    base = seconds["baseline"].per(len(data))
    print(f"capture: {len(data):,} bytes, {args.polls:,} polls of {HEADS} heads "
          f"(= {len(data) / LINE_RATE / 3600:.1f} h of a saturated 19200-baud line); "
          f"{args.repeat} interleaved repeats, median (spread)")
    print(f"  baseline crc_hqx + compiled Counts.parse: {base.show()} bytes/s")
    for name in ("one poll per feed", "4 KiB reads"):
        rate = seconds[name].per(len(data))
        print(f"  decoder, {name:>17}: {rate.show()} bytes/s = "
              f"{rate.scaled(1 / LINE_RATE).show()}x 19200 baud (no target set by an issue); "
              f"{rate.ratio(base).show('{:.2f}')}x baseline")
    print(host_line())


if __name__ == "__main__":
    main()
