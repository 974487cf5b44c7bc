"""A fleet's trust material in one folder: what ``frota provision`` makes and changes.

Layout (``docs/trust.md``)::

    DIR/fleet.json                 the provisioning state (broker address, collectors, vehicles)
    DIR/ca.crt                     the fleet CA's certificate (public)
    DIR/ca/ca.key                  the fleet CA's key (0600, in a 0700 folder; keep it offline)
    DIR/keyring.json               every certified signing key, revoked ones included
    DIR/collector.toml             the first collector's configuration
    DIR/collectors/NAME/           a collector's signing key and certificate, broker password
    DIR/vehicles/ID/               a bus's agent.toml, signing key and certificate, broker password
    DIR/mosquitto/                 mosquitto.conf, dynamic-security.json (logins and ACLs; passwd
                                   and acl without the plugin), the server's TLS key and certificate

Secret files (keys, passwords, the password file) are created with mode 0600 and never printed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from frota.provision import broker, dynsec, templates
from protocols import identity
from protocols.keyring import entry_json, read_entries, write_entries
from protocols.records import is_vehicle_id, ms_to_ts

FLEET_SCHEMA: Final = 1
COLLECTOR_PREFIX: Final = "collector-"


class ProvisionError(ValueError):
    """Provisioning cannot go on; the message says what to fix."""


@dataclass
class Fleet:
    """The provisioning state kept in ``DIR/fleet.json``."""

    folder: Path
    hosts: list[str]
    port: int
    bind: str
    broker_user: str
    registry: str
    collectors: list[str] = field(default_factory=list)
    vehicles: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The broker's dynamic security plugin (logins and ACLs that check SUBSCRIBE too); None:
    #: password file and ACL file (fleets provisioned before it, or without the plugin).
    dynsec_plugin: str | None = None

    # -- files ------------------------------------------------------------------------------
    @property
    def ca_cert_path(self) -> Path:
        """The CA certificate (public)."""
        return self.folder / "ca.crt"

    @property
    def ca_key_path(self) -> Path:
        """The CA key (secret)."""
        return self.folder / "ca" / "ca.key"

    @property
    def keyring_path(self) -> Path:
        """The keyring file."""
        return self.folder / "keyring.json"

    @property
    def mosquitto(self) -> Path:
        """The broker's folder."""
        return self.folder / "mosquitto"

    @property
    def dynsec_path(self) -> Path:
        """The dynamic security plugin's file (logins and ACLs)."""
        return self.mosquitto / "dynamic-security.json"

    @property
    def broker_url(self) -> str:
        """The URL agents and collectors connect to."""
        host = self.hosts[0]
        return f"mqtts://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def save(self) -> None:
        """Write ``fleet.json``."""
        doc = {
            "schema": FLEET_SCHEMA,
            "broker": {"hosts": self.hosts, "port": self.port, "bind": self.bind,
                       "user": self.broker_user, "dynsec_plugin": self.dynsec_plugin},
            "registry": self.registry,
            "collectors": self.collectors,
            "vehicles": self.vehicles,
        }
        tmp = self.folder / "fleet.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.folder / "fleet.json")

    def usernames(self) -> set[str]:
        """Every broker username in use (collectors' and vehicles', revoked ones included)."""
        return {COLLECTOR_PREFIX + c for c in self.collectors} | set(self.vehicles)

    def active_vehicles(self) -> list[str]:
        """The buses not revoked."""
        return [v for v, info in self.vehicles.items() if not info.get("revoked")]

    def collector_logins(self) -> list[str]:
        """The collectors' broker usernames."""
        return [COLLECTOR_PREFIX + c for c in self.collectors]

    @property
    def admin_password_path(self) -> Path:
        """Provisioning's own broker password (``frota provision apply``)."""
        return self.folder / "provision" / "password"

    def login_files(self) -> dict[str, Path]:
        """Every broker login the fleet has now (provisioning's own when it has one, the
        collectors', the active buses') and the 0600 file holding its password."""
        logins = {COLLECTOR_PREFIX + c: self.folder / "collectors" / c / "password"
                  for c in self.collectors}
        logins |= {v: self.folder / "vehicles" / v / "password" for v in self.active_vehicles()}
        if self.admin_password_path.exists():
            logins[dynsec.ADMIN_USER] = self.admin_password_path
        return logins

    def write_access(self, clients: dict[str, dict[str, Any]] | None = None) -> None:
        """Regenerate the ACL (or the dynamic security file's roles, its ``clients`` being
        ``clients`` or the file's own) from the collectors and the vehicles not revoked."""
        active = self.active_vehicles()
        collectors = self.collector_logins()
        if self.dynsec_plugin is not None:
            if clients is None:
                clients = dynsec.read_clients(self.dynsec_path)
            dynsec.write(self.dynsec_path, clients, collectors, active)
            broker.give_to_broker(self.broker_user, [self.dynsec_path])
            return
        acl = self.mosquitto / "acl"
        acl.write_text(broker.acl_text(collectors, active))
        os.chmod(acl, 0o644)
        broker.give_to_broker(self.broker_user, [acl])

    def set_login(self, username: str, password: str | None) -> None:
        """Give ``username`` this broker password (None: remove its login)."""
        if self.dynsec_plugin is not None:
            clients = dynsec.read_clients(self.dynsec_path)
            clients.pop(username, None)
            if password is not None:
                clients[username] = dynsec.client(username, password, username)
            self.write_access(clients)
            return
        passwd = self.mosquitto / "passwd"
        line = None if password is None else broker.hash_line(username, password)
        broker.set_password(passwd, username, line)
        broker.give_to_broker(self.broker_user, [passwd])

    def ca(self) -> tuple[Any, Any]:
        """The CA's key and certificate (ProvisionError when the key is not here)."""
        try:
            return identity.load_ca_key(self.ca_key_path), identity.load_cert_file(self.ca_cert_path)
        except identity.IdentityError as err:
            raise ProvisionError(f"the fleet CA: {err}") from err


def load(folder: Path) -> Fleet:
    """The fleet provisioned in ``folder``; ProvisionError when there is none."""
    path = folder / "fleet.json"
    try:
        doc = json.loads(path.read_text())
        brk = doc["broker"]
        if doc.get("schema") != FLEET_SCHEMA:
            raise ProvisionError(f"{path}: unsupported schema {doc.get('schema')!r}")
        return Fleet(folder.resolve(), list(brk["hosts"]), int(brk["port"]), str(brk["bind"]),
                     str(brk["user"]), str(doc["registry"]), list(doc["collectors"]),
                     dict(doc["vehicles"]), brk.get("dynsec_plugin"))
    except FileNotFoundError:
        raise ProvisionError(f"{folder} is not a provisioned fleet (run frota provision init)") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ProvisionError(f"{path}: unreadable: {err}") from err


def _mkdir(path: Path, mode: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def _check_name(kind: str, name: str) -> None:
    # The vehicle-id pattern (docs/records.md) for collectors too: both become broker user
    # names, topic levels and folder names (no "..", no trailing newline).
    if not is_vehicle_id(name):
        raise ProvisionError(f"{kind} {name!r}: must be 1-64 letters, digits, '_', '.' or '-', "
                             "starting with a letter or digit")


def _signing_identity(fleet: Fleet, folder: Path, role: str, name: str) -> None:
    """A new Ed25519 key in ``folder``, certified by the CA and added to the keyring."""
    ca_key, ca_cert = fleet.ca()
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, name, role, key.public_key())
    identity.write_secret(folder / "signing.key", identity.private_pem(key))
    (folder / "signing.crt").write_bytes(identity.cert_pem(cert))
    entries = read_entries(fleet.keyring_path)
    entries.append(entry_json(cert))
    write_entries(fleet.keyring_path, entries)


def _password(fleet: Fleet, folder: Path, username: str) -> None:
    password = secrets.token_urlsafe(24)
    identity.write_secret(folder / "password", password.encode())
    fleet.set_login(username, password)


def init(
    folder: Path,
    *,
    hosts: Sequence[str] = ("localhost", "127.0.0.1"),
    port: int = 8883,
    bind: str = "0.0.0.0",
    broker_user: str = "mosquitto",
    registry: Path | None = None,
    collector: str = "main",
    fleet_name: str = "Frota fleet CA",
    persistence: bool = True,
    dynsec_plugin: Path | None = None,
    acl_file: bool = False,
) -> Fleet:
    """Make a new fleet in ``folder`` (which must not hold one already). The broker checks
    logins and ACLs with its dynamic security plugin (``dynsec_plugin``, else the installed one,
    :func:`dynsec.find_plugin`); with ``acl_file``, or when the plugin is not found, with a
    password file and an ACL file, which cannot refuse a SUBSCRIBE (``fleet.dynsec_plugin`` is
    then None)."""
    folder = folder.resolve()
    if (folder / "fleet.json").exists():
        raise ProvisionError(f"{folder} already holds a provisioned fleet")
    _check_name("collector", collector)
    if not hosts:
        raise ProvisionError("give at least one --host for the broker's certificate")
    _mkdir(folder, 0o755)
    reg = registry.resolve() if registry is not None else folder / "registry.json"
    if registry is None and not reg.exists():
        reg.write_text(json.dumps({"lines": [], "vehicles": [], "drivers": []}, indent=1) + "\n")
    plugin = None if acl_file else (dynsec_plugin or dynsec.find_plugin())
    fleet = Fleet(folder, list(hosts), port, bind, broker_user, str(reg),
                  dynsec_plugin=None if plugin is None else str(plugin))
    ca_key, ca_cert = identity.make_ca(fleet_name)
    _mkdir(folder / "ca", 0o700)
    identity.write_secret(fleet.ca_key_path, identity.private_pem(ca_key))
    fleet.ca_cert_path.write_bytes(identity.cert_pem(ca_cert))
    write_entries(fleet.keyring_path, [])

    mosq = _mkdir(fleet.mosquitto, 0o750)
    _mkdir(mosq / "data", 0o750)
    server_key, server_cert = identity.make_server_cert(ca_key, ca_cert, list(hosts))
    identity.write_secret(mosq / "server.key", identity.private_pem(server_key))
    (mosq / "server.crt").write_bytes(identity.cert_pem(server_cert))
    (mosq / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    if plugin is None:
        broker.set_password(mosq / "passwd", "", None)
    else:
        fleet.write_access({})
        _password(fleet, _mkdir(folder / "provision", 0o700), dynsec.ADMIN_USER)
    (mosq / "mosquitto.conf").write_text(
        broker.conf_text(mosq, mosq / "ca.crt", port=port, bind=bind, user=broker_user,
                         persistence=persistence, dynsec_plugin=plugin)
    )
    fleet.save()
    add_collector(fleet, collector, config_path=folder / "collector.toml")
    broker.give_to_broker(
        broker_user,
        [mosq, mosq / "data", mosq / "server.key", mosq / "server.crt", mosq / "ca.crt",
         mosq / "passwd", mosq / "acl", fleet.dynsec_path, mosq / "mosquitto.conf"],
    )
    return fleet


def add_collector(fleet: Fleet, name: str, config_path: Path | None = None) -> Path:
    """A collector process: its signing key, broker credentials and ACL lines, its config file
    (``DIR/collectors/NAME/collector.toml`` unless ``config_path``); returns the config's path."""
    _check_name("collector", name)
    username = COLLECTOR_PREFIX + name
    if name in fleet.collectors or username in fleet.vehicles:
        raise ProvisionError(f"collector {name!r} is already provisioned")
    folder = _mkdir(fleet.folder / "collectors" / name, 0o700)
    _signing_identity(fleet, folder, "collector", name)
    _password(fleet, folder, username)
    fleet.collectors.append(name)
    fleet.save()
    fleet.write_access()
    path = config_path or folder / "collector.toml"
    path.write_text(templates.collector_toml(fleet, name, path.parent))
    return path


def add_vehicle(fleet: Fleet, vehicle: str, buffer_path: str) -> Path:
    """A bus: its agent's signing key, broker credentials, ACL lines and a ready agent.toml."""
    _check_name("vehicle", vehicle)
    if vehicle in fleet.usernames():
        raise ProvisionError(f"{vehicle!r} is already provisioned (revoked ids are not reused)")
    folder = _mkdir(fleet.folder / "vehicles" / vehicle, 0o700)
    _signing_identity(fleet, folder, "vehicle", vehicle)
    _password(fleet, folder, vehicle)
    (folder / "ca.crt").write_bytes(fleet.ca_cert_path.read_bytes())
    (folder / "agent.toml").write_text(templates.agent_toml(fleet, vehicle, buffer_path))
    fleet.vehicles[vehicle] = {"revoked": None}
    fleet.save()
    fleet.write_access()
    return folder / "agent.toml"


def revoke(fleet: Fleet, vehicle: str, at_ms: int | None = None) -> int:
    """Withdraw a bus: its broker login and ACL lines go, its keys are marked revoked in the
    keyring (kept, with their validity period); returns how many keys were revoked."""
    info = fleet.vehicles.get(vehicle)
    if info is None:
        raise ProvisionError(f"vehicle {vehicle!r} is not provisioned")
    if info.get("revoked"):
        raise ProvisionError(f"vehicle {vehicle!r} was already revoked at {info['revoked']}")
    now = at_ms if at_ms is not None else int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    when = ms_to_ts(now)
    entries = read_entries(fleet.keyring_path)
    count = 0
    for entry in entries:
        if entry.get("role") == "vehicle" and entry.get("name") == vehicle and not entry.get("revoked"):
            entry["revoked"] = when
            count += 1
    write_entries(fleet.keyring_path, entries)
    fleet.set_login(vehicle, None)
    info["revoked"] = when
    fleet.save()
    fleet.write_access()
    return count


def ensure_admin(fleet: Fleet) -> bool:
    """Give a fleet on the plugin provisioning's own login (``frota provision apply``) if it has
    none (fleets provisioned before it); True when it was added (the broker learns it only at its
    next start)."""
    if fleet.dynsec_plugin is None or fleet.admin_password_path.exists():
        return False
    _password(fleet, _mkdir(fleet.admin_password_path.parent, 0o700), dynsec.ADMIN_USER)
    return True


def use_dynsec(fleet: Fleet, plugin: Path | None = None) -> Path:
    """Move a fleet on the password and ACL files to the dynamic security plugin (``plugin``,
    else the installed one): every active login, its password read from its 0600 file, into
    ``dynamic-security.json``; ``mosquitto.conf``'s ``password_file`` and ``acl_file`` lines
    replaced by the plugin's. The old ``passwd`` and ``acl`` stay, unread. Returns the plugin."""
    if fleet.dynsec_plugin is not None:
        raise ProvisionError(f"the fleet already uses the dynamic security plugin "
                             f"({fleet.dynsec_plugin})")
    found = plugin or dynsec.find_plugin()
    if found is None:
        raise ProvisionError("Mosquitto's dynamic security plugin was not found here: give "
                             "--dynsec-plugin PATH (its path on the broker's machine)")
    conf = fleet.mosquitto / "mosquitto.conf"
    text = broker.conf_with_dynsec(conf.read_text(), fleet.mosquitto, found)
    if not fleet.admin_password_path.exists():
        password = secrets.token_urlsafe(24)
        _mkdir(fleet.admin_password_path.parent, 0o700)
        identity.write_secret(fleet.admin_password_path, password.encode())
    clients = {user: dynsec.client(user, path.read_text(), user)
               for user, path in fleet.login_files().items()}
    fleet.dynsec_plugin = str(found)
    fleet.write_access(clients)
    conf.write_text(text)  # the same file: its owner and mode are kept
    fleet.save()
    return found
