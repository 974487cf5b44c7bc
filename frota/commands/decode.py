"""``frota decode``: a capture from a bus (raw bytes or hex lines) → canonical records as JSON Lines."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from frota.errors import UserError
from protocols import registry
from protocols.records import RecordError, dumps, ts_to_ms

CHUNK = 64 * 1024


def _listed(*, clocked: bool) -> str:
    """The registered protocols with (or without) a clock, for the help text."""
    return ", ".join(name for name in registry.names() if registry.get(name).clocked == clocked)


def register(subparsers: Any) -> None:
    """Add ``frota decode`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "decode",
        help="decode a capture into canonical records (JSON Lines)",
        description="Decode a capture from a device (raw bytes, or hex text lines with --hex; "
        "a file or stdin) into canonical records as JSON Lines on stdout. A summary of "
        "what was dropped and why goes to stderr.",
        epilog=f"Time: devices with a clock ({_listed(clocked=True)}) stamp their own records "
        "(fms by the tachograph's TD message); fms reads candump logs and SLCAN text as they "
        "are (with --hex, hex of such text). "
        f"Devices without one ({_listed(clocked=False)}) need a --hex capture "
        "whose lines start with an RFC 3339 "
        "timestamp (e.g. '2026-03-02T14:23:05.021Z a5 01 81 ...'), the time of that line's "
        "bytes and of the lines after it; without any timestamp their records are dropped and "
        "counted as 'undated' in the summary.",
    )
    parser.add_argument(
        "--protocol", required=True, choices=registry.names(), help="the device's wire format"
    )
    parser.add_argument(
        "--vehicle",
        help="the vehicle id for the records (default: the file's name without extension, "
        "or 'stdin')",
    )
    parser.add_argument(
        "--hex",
        action="store_true",
        help="the input is hex text: whitespace ignored, '#' starts a comment, a line may "
        "start with an RFC 3339 timestamp",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="the capture (default: stdin)")
    parser.set_defaults(func=run)


def timed_hex_chunks(lines: Iterator[bytes]) -> Iterator[tuple[int | None, bytes]]:
    """Hex text lines, each maybe led by an RFC 3339 timestamp → (ms or None, bytes)."""
    for number, line in enumerate(lines, start=1):
        text = line.split(b"#", 1)[0].decode("ascii", errors="replace")
        words = text.split()
        ts_ms = None
        if words and ":" in words[0]:  # hex never holds ':'; a timestamp always does
            try:
                ts_ms = ts_to_ms(words[0])
            except RecordError as err:
                raise UserError(f"line {number}: {err}") from err
            words = words[1:]
        digits = "".join(words)
        if not digits and ts_ms is None:
            continue
        try:
            yield ts_ms, bytes.fromhex(digits)
        except ValueError as err:
            raise UserError(f"line {number} is not hex: {text.strip()[:40]!r}") from err


def raw_chunks(stream: BinaryIO) -> Iterator[bytes]:
    """A binary stream in chunks."""
    while chunk := stream.read(CHUNK):
        yield chunk


#: How much of the input is kept to find out why nothing decoded (bytes).
SAMPLE = 64 * 1024


def looks_like_hex_text(sample: bytes) -> bool:
    """True if the bytes read as ``--hex`` input (hex digits, maybe timestamps and comments)."""
    try:
        text = sample.decode("ascii")
    except UnicodeDecodeError:
        return False
    lines = text.splitlines(keepends=True)
    if len(sample) == SAMPLE and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut short
    try:
        return any(data for _, data in timed_hex_chunks(line.encode() for line in lines))
    except UserError:
        return False


def why_nothing(protocol: str, sample: bytes, hex_input: bool) -> str:
    """The likeliest reason a capture gave no record: hex text read as raw bytes, another
    device's capture, or simply not this device."""
    if not hex_input and looks_like_hex_text(sample):
        return "the input looks like hex text: add --hex"
    for other in registry.names():
        if other == protocol:
            continue
        decoder = registry.get(other).make_decoder("probe")
        decoder.feed(sample)
        if decoder.stats.frames:
            return f"it holds {other} frames: --protocol {other}?"
    return f"is it a capture of a {protocol} device? (see --help and firmware-notes/)"


def run(args: argparse.Namespace) -> int:
    """Decode the capture and print records; the drop summary goes to stderr."""
    info = registry.get(args.protocol)
    if args.file is None:
        vehicle = args.vehicle or "stdin"
        stream: BinaryIO = sys.stdin.buffer
    else:
        path = Path(args.file)
        vehicle = args.vehicle or path.stem
        try:
            stream = path.open("rb")
        except OSError as err:
            raise UserError(f"cannot read {path}: {err.strerror}") from err
    decoder = info.make_decoder(vehicle)
    out = sys.stdout
    written = 0
    read = 0
    sample = bytearray()  # the first bytes, to say why if nothing decodes
    with stream:
        if args.hex:
            chunks: Iterator[tuple[int | None, bytes]] = timed_hex_chunks(iter(stream))
        else:
            chunks = ((None, chunk) for chunk in raw_chunks(stream))
        for ts_ms, chunk in chunks:
            if ts_ms is not None:
                decoder.set_time(ts_ms)  # stamps the records of a device without a clock
            read += len(chunk)
            if len(sample) < SAMPLE:
                sample += chunk[: SAMPLE - len(sample)]
            for record in decoder.feed(chunk):
                out.write(dumps(record) + "\n")
                written += 1
    for record in decoder.finish():
        out.write(dumps(record) + "\n")
        written += 1
    out.flush()
    summary = {"protocol": args.protocol, "vehicle": vehicle, **decoder.stats.summary()}
    print("decode summary: " + json.dumps(summary), file=sys.stderr)
    if not info.clocked and summary.get("undated"):
        print(
            f"  {summary['undated']} records had no time: {args.protocol} devices have no clock, "
            "give --hex lines that start with an RFC 3339 timestamp",
            file=sys.stderr,
        )
    for reason, raw in decoder.stats.rejected[-10:]:
        print(f"  rejected ({reason}): {raw[:96]}{'…' if len(raw) > 96 else ''}", file=sys.stderr)
    if written == 0:
        source = "stdin" if args.file is None else args.file
        if read == 0:
            raise UserError(f"nothing to decode: {source} is empty")
        if summary.get("undated"):
            raise UserError(f"no record from {source}: every {args.protocol} record was undated")
        raise UserError(
            f"no record decoded from {source} ({read} bytes) as {args.protocol}: "
            + why_nothing(args.protocol, bytes(sample), args.hex)
        )
    return 0
