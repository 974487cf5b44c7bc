"""The configuration files ``frota provision`` writes: a collector's and a bus's agent's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from frota.provision.fleet import Fleet


def _q(value: str) -> str:
    """A TOML basic string (JSON's escaping is valid TOML for these values)."""
    return json.dumps(value)


def _rel(path: Path, base: Path) -> str:
    return os.path.relpath(path, base)


def collector_toml(fleet: Fleet, name: str, base: Path) -> str:
    """The collector ``name``'s configuration; paths relative to ``base`` (the file's folder)."""
    own = fleet.folder / "collectors" / name
    username = f"collector-{name}"
    return f"""# Collector {name!r} of a provisioned fleet (frota provision; keys in docs/collector.md).
registry = {_q(_rel(Path(fleet.registry), base))}

[broker]
url = {_q(fleet.broker_url)}
client_id = {_q(username)}          # the broker forces the client id to the username anyway
username = {_q(username)}
password_file = {_q(_rel(own / 'password', base))}
# share_group = "frota"             # several collectors, one fleet: the same group in each, one
                                    # PostgreSQL (database.dsn); see docs/deployment.md

[broker.tls]
ca_file = {_q(_rel(fleet.ca_cert_path, base))}

[database]
path = {_q("collector.db" if name == fleet.collectors[0] else f"collector-{name}.db")}

[trust]
ca_file = {_q(_rel(fleet.ca_cert_path, base))}
keyring = {_q(_rel(fleet.keyring_path, base))}
key_file = {_q(_rel(own / 'signing.key', base))}
cert_file = {_q(_rel(own / 'signing.crt', base))}

[http]
host = "127.0.0.1"                  # behind a reverse proxy that ends TLS (docs/collector.md)
port = 8080
tokens_file = {_q(_rel(fleet.folder / 'tokens.json', base))}
allowed_hosts = ["127.0.0.1", "localhost"]
"""


def agent_toml(fleet: Fleet, vehicle: str, buffer_path: str) -> str:
    """A ready ``agent.toml`` for ``vehicle``: broker, credentials, TLS, signing key, and the
    standard devices under their udev names (firmware-notes/udev)."""
    return f"""# Agent of bus {vehicle} (frota provision vehicle; every key in firmware-notes/agent-config.md).
# Copy this folder to /etc/frota on the bus; relative paths are relative to this file.
vehicle = {_q(vehicle)}

[buffer]
path = {_q(buffer_path)}

[broker]
url = {_q(fleet.broker_url)}
username = {_q(vehicle)}
password_file = "password"

[broker.tls]
ca_file = "ca.crt"

[identity]
key_file = "signing.key"            # signs the chain checkpoints (firmware-notes/mqtt.md)
cert_file = "signing.crt"
ca_file = "ca.crt"                  # acknowledgements must be signed by a collector it certified

[[devices]]
name = "registrador"
protocol = "registrador"
port = "/dev/frota-registrador"
baudrate = 115200

[[devices]]
name = "gps"
protocol = "nmea"
port = "/dev/frota-gps"
baudrate = 9600

[[devices]]
name = "doors"
protocol = "apc"
port = "/dev/frota-rs485"
baudrate = 19200

[[devices.counters]]
address = 1

[[devices.counters]]
address = 2
"""
