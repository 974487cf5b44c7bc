"""``frota agent``: the program on the bus (``run``) and a look into its buffer (``status``)."""

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
    run_parser = sub.add_parser(
        "run",
        help="run the agent in the foreground until SIGTERM/SIGINT",
        description="Run the agent with a TOML configuration (firmware-notes/agent-config.md). "
        "A bad configuration is refused with a one-line message naming the key.",
    )
    run_parser.add_argument("--config", required=True, metavar="FILE", help="the agent's TOML file")
    run_parser.set_defaults(func=run)
    status_parser = sub.add_parser(
        "status",
        help="backlog, last acknowledgement, each device's health and the disk left",
        description="Read the agent's buffer (read-only; the agent may be running) and show "
        "the backlog, the last acknowledgement from the collector, each configured device's "
        "health (its latest device record, time since its last record) and the disk left.",
    )
    status_parser.add_argument("--config", required=True, metavar="FILE", help="the agent's TOML file")
    status_parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    status_parser.set_defaults(func=status)


def run(args: argparse.Namespace) -> int:
    """Load the configuration and run the agent."""
    from agent import logsetup
    from agent.buffer import BufferError
    from agent.config import ConfigError, check_start, load_config
    from agent.main import run as run_agent
    from protocols.mqtt_client import MqttError

    # stderr (the journal under systemd), rate-limited so a noisy line cannot fill the SD card.
    logsetup.configure(level=args.log_level)
    try:
        config = load_config(args.config)
        check_start(config)
        return run_agent(config)
    except (ConfigError, BufferError, MqttError) as err:
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
