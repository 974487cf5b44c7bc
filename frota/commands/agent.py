"""``frota agent``: the program on the bus (``run``), a look into its buffer (``status``) and a
capture of one device's bytes (``capture``)."""

from __future__ import annotations

import argparse
from typing import Any

from frota.errors import UserError


def register(subparsers: Any) -> None:
    """Add ``frota agent`` and its subcommands to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "agent",
        help="the on-bus agent: serial devices → durable buffer → MQTT",
        description="The on-bus agent. 'run' reads the serial devices, keeps every record in a "
        "durable SQLite buffer and ships it to the collector over MQTT.",
    )
    sub = parser.add_subparsers(dest="agent_command", metavar="SUBCOMMAND")
    sub.required = True
    run_parser = _with_config(sub.add_parser(
        "run",
        help="run the agent in the foreground until SIGTERM/SIGINT",
        description="Run the agent with a TOML configuration (firmware-notes/agent-config.md). "
        "A bad configuration is refused with a one-line message naming the key.",
    ))
    run_parser.set_defaults(func=run)
    status_parser = _with_config(sub.add_parser(
        "status",
        help="backlog, last acknowledgement, each device's health and the disk left",
        description="Read the agent's buffer (read-only; the agent may be running) and show "
        "the backlog, the last acknowledgement from the collector, each configured device's "
        "health (its latest device record, time since its last record) and the disk left.",
    ))
    status_parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    status_parser.set_defaults(func=status)
    capture_parser = _with_config(sub.add_parser(
        "capture",
        help="record a device's raw bytes with their times, for frota decode --hex and support",
        description="Record one device's raw bytes with their times for SECONDS into FILE, as "
        "lines 'RFC3339-time hex-bytes' that 'frota decode --protocol P --hex' reads (door "
        "counters: the agent's polls included). Through the running agent (it holds the port "
        "and tees the device's bytes); with no agent running, the port is opened here with the "
        "agent's settings. Never opens a port another process holds.",
    ))
    capture_parser.add_argument("--device", required=True, metavar="NAME",
                                help="the device's name in the configuration ([[devices]] name)")
    capture_parser.add_argument("--seconds", required=True, type=float, metavar="N",
                                help="how long to record (at most 3600)")
    capture_parser.add_argument("--out", required=True, metavar="FILE", help="the capture file to write")
    capture_parser.set_defaults(func=capture)
    replay_parser = _with_config(sub.add_parser(
        "replay",
        help="send again the records the collector rejected for a cause that may change",
        description="Make the records the collector rejected as retryable (an unknown vehicle, "
        "a newer schema) pending again, so that the agent sends them again (at once if it is "
        "running, else when it starts). Final rejects and conflicts are never resent.",
    ))
    replay_parser.add_argument("--seq", metavar="A-B", help="only seqs A to B (or one seq A)")
    replay_parser.set_defaults(func=replay)
    export_parser = _with_config(sub.add_parser(
        "export",
        help="write the bus's signed bundle of its last days to a file or a USB stick",
        description="Write the signed bundle of the last N days of records from the agent's "
        "buffer (read-only; the agent may be running) to PATH — a file, or a folder such as a "
        "USB stick's mount point (frota-VEHICLE-DATE.zip in it). Signed by the bus's key with its "
        "certificate from the fleet CA; 'frota verify BUNDLE' checks it. Every export is logged "
        "(exports.log beside the buffer). See docs/roadside.md.",
    ))
    export_parser.add_argument("--days", required=True, type=int, metavar="N",
                               help="how many days back from the newest record (1 to 31)")
    export_parser.add_argument("--out", required=True, metavar="PATH",
                               help="the bundle file to write, or a folder to write it in")
    export_parser.set_defaults(func=export)
    page_parser = _with_config(sub.add_parser(
        "page",
        help="serve the read-only roadside page for an inspector's phone on the bus's network",
        description="Serve a small read-only page (last 24 h, the Disco do dia, the signed "
        "bundle) on the bus's local network. Every request needs an inspector's token from "
        "'frota collector inspector-token', checked offline against the fleet CA; every read is "
        "logged (roadside.log beside the buffer). Plain HTTP: see docs/roadside.md, 'Where TLS "
        "ends'.",
    ))
    page_parser.add_argument("--listen", required=True, metavar="HOST:PORT",
                             help="the bus's local-network address to listen on (its Wi-Fi's, "
                             "never the modem's), e.g. 192.168.50.1:8080")
    page_parser.add_argument("--timezone", default="America/Sao_Paulo", metavar="ZONE",
                             help="the bus's local time zone for the disc (default "
                             "America/Sao_Paulo)")
    page_parser.set_defaults(func=page)


def _with_config(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every agent subcommand reads the agent's TOML file."""
    parser.add_argument("--config", required=True, metavar="FILE", help="the agent's TOML file")
    return parser


def run(args: argparse.Namespace) -> int:
    """Load the configuration and run the agent."""
    from agent import logsetup
    from agent.buffer import BufferError
    from agent.config import ConfigError, check_start, load_config
    from agent.main import run as run_agent
    from protocols.identity import IdentityError
    from protocols.mqtt_client import MqttError

    # stderr (the journal under systemd), rate-limited so a noisy line cannot fill the SD card.
    logsetup.configure(level=args.log_level)
    try:
        config = load_config(args.config)
        check_start(config)
        return run_agent(config)
    except (ConfigError, BufferError, MqttError, IdentityError) as err:
        raise UserError(str(err)) from err


def status(args: argparse.Namespace) -> int:
    """Print the agent's status from its buffer."""
    import json

    from agent.config import ConfigError, load_config
    from agent.status import StatusError, collect, render

    try:
        result = collect(load_config(args.config))
    except (ConfigError, StatusError) as err:
        raise UserError(str(err)) from err
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


def capture(args: argparse.Namespace) -> int:
    """Record a device's raw bytes through the running agent, or alone if none runs."""
    import sys
    from pathlib import Path

    from agent.capture import MAX_SECONDS, CaptureError, socket_path, standalone, through_agent
    from agent.config import ConfigError, load_config
    from agent.hostclock import wall_ms
    from protocols.records import ms_to_ts

    try:
        config = load_config(args.config)
    except ConfigError as err:
        raise UserError(str(err)) from err
    device = next((d for d in config.devices if d.name == args.device), None)
    if device is None:
        names = ", ".join(d.name for d in config.devices) or "none"
        raise UserError(f"--device: no device {args.device!r} in {args.config} (it has: {names})")
    if not 0 < args.seconds <= MAX_SECONDS:
        raise UserError(f"--seconds: {args.seconds:g} is not in (0, {MAX_SECONDS:g}]")
    out = Path(args.out)
    try:
        stream = out.open("w", encoding="ascii")
    except OSError as err:
        raise UserError(f"--out: cannot write {out}: {err.strerror}") from err
    lines = 0

    def write(line: str) -> None:
        nonlocal lines
        stream.write(line)
        lines += not line.startswith("#")

    decode = f"frota decode --protocol {device.protocol} --hex --vehicle {config.vehicle} {out}"
    with stream:
        stream.write(
            f"# frota agent capture: vehicle {config.vehicle}, device {device.name} "
            f"({device.protocol}) on {device.port}, {args.seconds:g} s from {ms_to_ts(wall_ms())} "
            "(host clock)\n# each line: time (the agent's time keeper) and the bytes in hex; "
            f"decode with: {decode}\n"
        )
        try:
            header = through_agent(socket_path(config.buffer.path), device.name, args.seconds, write)
            how = "through the running agent"
            if header is None:
                how = f"opening {device.port} (no agent running)"
                stream.write(f"# {how}\n")
                standalone(config, device, args.seconds, write)
        except CaptureError as err:
            raise UserError(str(err)) from err
    print(f"frota agent capture: {lines} lines from {device.name} {how} in {out}; "
          f"decode with: {decode}", file=sys.stderr)
    return 0


def _seq_range(text: str | None) -> tuple[int, int | None]:
    if text is None:
        return 1, None
    first, _, last = text.strip().partition("-")
    try:
        lo, hi = int(first), int(last) if last else int(first)
    except ValueError:
        raise UserError(f"--seq {text!r} is not A-B nor A (seq numbers)") from None
    if lo < 1 or hi < lo:
        raise UserError(f"--seq {text!r}: need 1 <= A <= B")
    return lo, hi


def replay(args: argparse.Namespace) -> int:
    """Make the retryable rejected records pending again."""
    from agent.buffer import Buffer, BufferError
    from agent.config import ConfigError, load_config

    first, last = _seq_range(args.seq)
    try:
        config = load_config(args.config)
        if not config.buffer.path.is_file():
            raise UserError(f"no buffer at {config.buffer.path} (the agent has not run yet)")
        buf = Buffer(config.buffer.path)
    except (ConfigError, BufferError) as err:
        raise UserError(str(err)) from err
    try:
        before = buf.counts()
        again = buf.replay_rejected(first, last)
    except BufferError as err:
        raise UserError(str(err)) from err
    finally:
        buf.close()
    final = before.rejected - before.retryable
    print(f"frota agent replay: {again} retryable rejected records will be sent again; "
          f"{final} final rejects and {before.conflicts} conflicts are not resent")
    return 0



def export(args: argparse.Namespace) -> int:
    """Write the bus's signed bundle from its buffer."""
    import sys

    from agent.config import ConfigError, load_config
    from agent.export import ExportError
    from agent.export import export as write_bundle

    try:
        done = write_bundle(load_config(args.config), args.days, args.out)  # str: keeps a trailing /
    except (ConfigError, ExportError) as err:
        raise UserError(str(err)) from err
    if not done.signed:
        print("warning: the agent has no [identity]: the bundle is NOT signed", file=sys.stderr)
    seqs = "" if done.first_seq is None else f" (seq {done.first_seq} to {done.last_seq})"
    print(f"wrote {done.path}: {done.records} record(s){seqs}, sha256 {done.sha256}; "
          f"check it with: frota verify {done.path} --ca CA_FILE")
    return 0


def page(args: argparse.Namespace) -> int:
    """Serve the roadside page."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from agent import logsetup
    from agent.config import ConfigError, load_config
    from agent.roadside_page import listen_address, serve
    from protocols.identity import IdentityError, load_cert_file

    logsetup.configure(level=args.log_level)
    try:
        config = load_config(args.config)
    except ConfigError as err:
        raise UserError(str(err)) from err
    if config.identity is None:
        raise UserError(f"{args.config}: no [identity]: the page needs the fleet CA to check "
                        "inspectors' tokens")
    ca_file = config.identity.ca_file or config.identity.cert_file.parent / "ca.crt"
    try:
        fleet_ca = load_cert_file(ca_file)
    except IdentityError as err:
        raise UserError(str(err)) from err
    try:
        zone = ZoneInfo(args.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise UserError(f"--timezone {args.timezone!r} is not a time zone") from None
    try:
        host, port = listen_address(args.listen)
    except ValueError as err:
        raise UserError(str(err)) from None
    serve(config, fleet_ca, zone, host, port)
    return 0
