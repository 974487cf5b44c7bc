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
from protocols.records import dumps

CHUNK = 64 * 1024


def register(subparsers: Any) -> None:
    """Add ``frota decode`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "decode",
        help="decode a capture into canonical records (JSON Lines)",
        description="Decode a capture from a device (raw bytes, or hex text lines with --hex; "
        "a file or stdin) into canonical records as JSON Lines on stdout. A summary of "
        "what was dropped and why goes to stderr.",
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
        help="the input is hex text: whitespace ignored, '#' starts a comment",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="the capture (default: stdin)")
    parser.set_defaults(func=run)


def hex_chunks(lines: Iterator[bytes]) -> Iterator[bytes]:
    """Hex text lines (comments after '#', any whitespace) → bytes, one chunk per line."""
    for number, line in enumerate(lines, start=1):
        text = line.split(b"#", 1)[0].decode("ascii", errors="replace")
        digits = "".join(text.split())
        if not digits:
            continue
        try:
            yield bytes.fromhex(digits)
        except ValueError as err:
            raise UserError(f"line {number} is not hex: {text.strip()[:40]!r}") from err


def raw_chunks(stream: BinaryIO) -> Iterator[bytes]:
    """A binary stream in chunks."""
    while chunk := stream.read(CHUNK):
        yield chunk


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
    with stream:
        chunks = hex_chunks(iter(stream)) if args.hex else raw_chunks(stream)
        for chunk in chunks:
            for record in decoder.feed(chunk):
                out.write(dumps(record) + "\n")
    finish = getattr(decoder, "finish", None)
    if callable(finish):
        for record in finish():
            out.write(dumps(record) + "\n")
    out.flush()
    summary = {"protocol": args.protocol, "vehicle": vehicle, **decoder.stats.summary()}
    print("decode summary: " + json.dumps(summary), file=sys.stderr)
    for reason, raw in decoder.stats.rejected[-10:]:
        print(f"  rejected ({reason}): {raw[:96]}{'…' if len(raw) > 96 else ''}", file=sys.stderr)
    return 0
