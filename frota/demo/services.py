"""The demo's configurations for its real processes (:mod:`frota.harness` runs them).

The configurations written here are ordinary ones: the files the README and the docs describe,
runnable by hand afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_collector_conf(path: Path, broker_port: int, http_port: int) -> None:
    """The collector's configuration (docs/collector.md), beside fleet.json and collector.db."""
    path.write_text(
        "# Written by frota demo; run it by hand with: frota collector run --config collector.toml\n"
        'registry = "fleet.json"\n\n'
        "[broker]\n"
        f'url = "mqtt://127.0.0.1:{broker_port}"\n'
        'client_id = "frota-demo-collector"\n\n'
        "[database]\n"
        'path = "collector.db"\n\n'
        "[http]\n"
        'host = "127.0.0.1"\n'
        f"port = {http_port}\n",
        encoding="utf-8",
    )


def write_agent_conf(path: Path, vehicle: str, broker_port: int, ttys: Mapping[str, Path],
                     doors: int, broker_tables: str | None = None) -> None:
    """The agent's configuration (firmware-notes/agent-config.md) for the three simulated lines
    (the tachograph's is ``registrador``, or ``fms``: an SLCAN adapter on the bus's FMS CAN);
    ``broker_tables``: the provisioned ``[broker]``, ``[broker.tls]`` and ``[identity]`` tables
    (frota/provision/demo.py) instead of an anonymous broker."""
    # The lines stay quiet for a few seconds while the demo waits for the last records to be
    # confirmed (see frota/commands/demo.py): silent_after_s is long enough not to report that.
    quiet = "silent_after_s = 60\nreopen_min_s = 0.2\nreopen_max_s = 2\n"
    text = (
        "# Written by frota demo; the devices are the scenario player's pseudo-terminals.\n"
        f'vehicle = "{vehicle}"\n\n'
        "[buffer]\n"
        'path = "buffer.sqlite"\n'
        "commit_interval_ms = 100\n\n"
    )
    if broker_tables is not None:
        text += broker_tables + "\n"
    else:
        text += (
            "[broker]\n"
            f'url = "mqtt://127.0.0.1:{broker_port}"\n'
            f'client_id = "frota-demo-{vehicle}"\n\n'
        )
    text += (
        "[uplink]\n"
        "batch_interval_ms = 250\n"
        "ack_timeout_s = 5\n\n"
        + (
            "[[devices]]\n"
            'name = "fms"\nprotocol = "fms"\ninterface = "slcan"\nopen_wait_s = 0\n'
            f'port = "{ttys["fms"]}"\n{quiet}\n'
            if "fms" in ttys else
            "[[devices]]\n"
            'name = "registrador"\nprotocol = "registrador"\n'
            f'port = "{ttys["registrador"]}"\nbaudrate = 115200\n{quiet}\n'
        ) +
        "[[devices]]\n"
        'name = "gps"\nprotocol = "nmea"\n'
        f'port = "{ttys["gps"]}"\nbaudrate = 9600\n{quiet}\n'
        "[[devices]]\n"
        'name = "doors"\nprotocol = "apc"\n'
        f'port = "{ttys["apc"]}"\nbaudrate = 19200\n'
        f"poll_interval_s = 0.1\nreply_timeout_s = 0.2\n{quiet}"
    )
    for door in range(1, doors + 1):
        text += f"\n[[devices.counters]]\naddress = {door}\ndoor = {door}\n"
    path.write_text(text, encoding="utf-8")
