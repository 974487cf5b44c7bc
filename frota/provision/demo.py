"""``frota demo`` runs provisioned: its broker, collector and agent get a fleet of their own.

The demo's fleet is made in ``WORKDIR/fleet`` exactly as an operator's (``frota provision init``
and ``vehicle``), on a free loopback port: TLS, no anonymous access, logins and roles in the
broker's dynamic security plugin, signed checkpoints and acknowledgements; the collector's API
needs a token, made here (admin).
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from collector import tokens
from frota.provision import fleet as provisioning
from frota.provision import templates
from protocols import identity


@dataclass(frozen=True)
class DemoTrust:
    """What the demo's processes are started with."""

    folder: Path
    mosquitto_conf: Path
    collector_conf: Path
    #: The agent's ``[broker]``, ``[broker.tls]`` and ``[identity]`` tables (TOML).
    agent_tables: str
    #: An admin API token for the demo's own calls (``/health``).
    token: str


def _others_can_enter(path: Path) -> bool:
    """True when every folder above ``path`` lets other users through (mode o+x)."""
    for parent in [path, *path.parents]:
        try:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        except FileNotFoundError:
            continue
    return True


def broker_user(folder: Path) -> str:
    """The user the demo's broker runs as: ``mosquitto`` as root when it can reach ``folder``
    (as in production), else whoever runs the demo (Mosquitto switches users only as root)."""
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("mosquitto")
            if _others_can_enter(folder):
                return "mosquitto"
        except KeyError:
            pass
        return "root"
    return pwd.getpwuid(os.geteuid()).pw_name


def provision(workdir: Path, vehicle: str, broker_port: int, http_port: int, registry: Path,
              database: Path, buffer: Path) -> DemoTrust:
    """Provision the demo's fleet in ``workdir/fleet``; the broker's configuration stays there,
    the collector's is ``workdir/collector.toml`` (its paths relative to ``workdir``)."""
    folder = workdir / "fleet"
    made = provisioning.init(folder, hosts=["127.0.0.1"], port=broker_port, bind="127.0.0.1",
                             broker_user=broker_user(workdir), registry=registry,
                             persistence=False)
    agent_toml = provisioning.add_vehicle(made, vehicle, str(buffer))
    config = workdir / "collector.toml"
    text = templates.collector_toml(made, made.collectors[0], workdir)
    text = re.sub(r"(?m)^port = 8080", f"port = {http_port}", text)
    text = re.sub(r'(?m)^path = "collector\.db"', f'path = "{database.name}"', text)
    config.write_text("# Written by frota demo from its provisioned fleet (fleet/, docs/trust.md)\n"
                      + text)
    own = agent_toml.parent
    tables = (
        "[broker]\n"
        f'url = "{made.broker_url}"\n'
        f'username = "{vehicle}"\n'
        f'password_file = "{own / "password"}"\n\n'
        "[broker.tls]\n"
        f'ca_file = "{own / "ca.crt"}"\n\n'
        "[identity]\n"
        f'key_file = "{own / "signing.key"}"\n'
        f'cert_file = "{own / "signing.crt"}"\n'
        f'ca_file = "{own / "ca.crt"}"\n'
    )
    token = tokens.add(folder / "tokens.json", "admin")[1]
    identity.write_secret(folder / "admin.token", (token + "\n").encode())
    return DemoTrust(folder, made.mosquitto / "mosquitto.conf", config, tables, token)
