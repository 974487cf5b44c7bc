"""The broker's access rules as Mosquitto's dynamic security plugin reads them.

Mosquitto 2's ``acl_file`` grants every SUBSCRIBE and checks only deliveries, so a bus holding
valid credentials could join the collectors' shared-subscription group and take (then drop) its
round-robin share of every bus's batches. The dynamic security plugin shipped with Mosquitto checks
SUBSCRIBE against each role's ``subscribeLiteral``/``subscribePattern`` ACLs, so provisioning
writes its configuration file instead (``DIR/mosquitto/dynamic-security.json``, docs/trust.md):

- every collector and bus is a client with a PBKDF2-SHA512 password hash (the plugin's own
  ``password``/``salt``/``iterations`` fields, 12-byte salt, 64-byte hash; no Python library
  writes them, so :mod:`hashlib` does);
- role ``frota-collector``: reads every bus's ``up`` and ``status``, writes every ``ack``, may
  subscribe to ``frota/v1/+/up``, ``frota/v1/+/status`` and ``$share/<any group>/frota/v1/+/up``;
  writes, reads and may subscribe to the evaluation notices (``frota/v1/evaluated``);
- role ``frota-vehicle-ID`` per bus: writes its own ``up`` and ``status``, reads and may subscribe
  to its own ``ack`` and ``status`` only;
- role ``frota-provision`` for provisioning's own login (:data:`ADMIN_USER`, a name no bus or
  collector can have): the plugin's control topic, through which ``frota provision apply`` makes
  a running broker take a change (:mod:`frota.provision.live`);
- everything else is refused (``defaultACLAccess``: only unsubscribing is allowed).

Mosquitto 2.0 reads this file when it starts (a SIGHUP does not re-read it), and writes it back
after each change made through ``$CONTROL/dynamic-security``, which only provisioning's login may
make (it writes its own version back afterwards): the file provisioning writes is the one the
broker runs with after a restart.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from protocols.evaluated import EVALUATED_TOPIC
from protocols.identity import write_secret
from protocols.uplink import TOPIC_ROOT

PLUGIN_NAME: Final = "mosquitto_dynamic_security.so"
#: Where distributions install the plugin (Debian: one folder per architecture).
PLUGIN_GLOBS: Final = (
    "/usr/lib/*/" + PLUGIN_NAME,
    "/usr/lib/" + PLUGIN_NAME,
    "/usr/lib64/" + PLUGIN_NAME,
    "/usr/local/lib/" + PLUGIN_NAME,
    "/usr/lib/mosquitto/" + PLUGIN_NAME,
)
#: The plugin's password hash: PBKDF2-SHA512, its default iterations, 12-byte salt.
ITERATIONS: Final = 101
SALT_BYTES: Final = 12
HASH_BYTES: Final = 64
COLLECTOR_ROLE: Final = "frota-collector"
VEHICLE_ROLE_PREFIX: Final = "frota-vehicle-"
ADMIN_ROLE: Final = "frota-provision"
#: Provisioning's login: vehicle and collector names start with a letter or digit.
ADMIN_USER: Final = "_frota-provision"
CONTROL: Final = "$CONTROL/dynamic-security/v1"
#: What a client may do that no role of its grants: only unsubscribe.
DEFAULT_ACCESS: Final = {"publishClientSend": False, "publishClientReceive": False,
                         "subscribe": False, "unsubscribe": True}


class DynsecError(RuntimeError):
    """The dynamic security file cannot be read or written; the message says which and why."""


def find_plugin() -> Path | None:
    """The installed dynamic security plugin: the usual library folders, then the files of
    Debian's ``mosquitto`` package (any architecture); None when not found."""
    for pattern in PLUGIN_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[0])
    dpkg = shutil.which("dpkg")
    if dpkg:
        done = subprocess.run([dpkg, "-L", "mosquitto"], capture_output=True, text=True,
                              check=False)
        for line in done.stdout.splitlines():
            if line.endswith("/" + PLUGIN_NAME) and os.path.isfile(line):
                return Path(line)
    return None


def password_fields(password: str, salt: bytes | None = None) -> dict[str, Any]:
    """A client's ``password``, ``salt`` and ``iterations`` (base64) for ``password``."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, ITERATIONS, HASH_BYTES)
    return {"password": base64.b64encode(digest).decode(), "salt": base64.b64encode(salt).decode(),
            "iterations": ITERATIONS}


def _acl(acltype: str, topic: str) -> dict[str, Any]:
    return {"acltype": acltype, "topic": topic, "priority": 0, "allow": True}


def collector_role() -> dict[str, Any]:
    """Collectors read every bus's ``up`` and ``status`` (alone or in any shared-subscription
    group) and write acknowledgements."""
    up, status, ack = f"{TOPIC_ROOT}/+/up", f"{TOPIC_ROOT}/+/status", f"{TOPIC_ROOT}/+/ack"
    return {"rolename": COLLECTOR_ROLE, "textdescription": "frota collectors", "acls": [
        _acl("publishClientReceive", up), _acl("publishClientReceive", status),
        _acl("publishClientSend", ack),
        _acl("subscribePattern", up), _acl("subscribePattern", status),
        _acl("subscribePattern", f"$share/+/{up}"),
        # the evaluation notices (protocols/evaluated.py): sent, and read by a collector's monitor
        _acl("publishClientSend", EVALUATED_TOPIC), _acl("publishClientReceive", EVALUATED_TOPIC),
        _acl("subscribeLiteral", EVALUATED_TOPIC),
    ]}


def vehicle_role(vehicle: str) -> dict[str, Any]:
    """A bus writes only its own ``up`` and ``status``; reads and subscribes to only its own
    ``ack`` and ``status`` (literal topics: a bus cannot subscribe with wildcards)."""
    root = f"{TOPIC_ROOT}/{vehicle}"
    return {"rolename": VEHICLE_ROLE_PREFIX + vehicle, "textdescription": f"bus {vehicle}",
            "acls": [
                _acl("publishClientSend", f"{root}/up"), _acl("publishClientSend", f"{root}/status"),
                _acl("publishClientReceive", f"{root}/ack"),
                _acl("publishClientReceive", f"{root}/status"),
                _acl("subscribeLiteral", f"{root}/ack"), _acl("subscribeLiteral", f"{root}/status"),
            ]}


def admin_role() -> dict[str, Any]:
    """Provisioning's login sends the plugin's commands and reads its answers, nothing else."""
    return {"rolename": ADMIN_ROLE, "textdescription": "frota provision apply", "acls": [
        _acl("publishClientSend", CONTROL), _acl("publishClientReceive", CONTROL + "/response"),
        _acl("subscribeLiteral", CONTROL + "/response"),
    ]}


def roles(vehicles: Iterable[str]) -> list[dict[str, Any]]:
    """Every role of a fleet whose active buses are ``vehicles``."""
    return [admin_role(), collector_role(), *(vehicle_role(v) for v in sorted(vehicles))]


def role_of(username: str, collectors: Iterable[str], vehicles: Iterable[str]) -> str | None:
    """The role of login ``username`` when the fleet's collector logins are ``collectors`` and
    its active buses ``vehicles`` (by membership, never by the shape of the name); None: no
    role, the login may do nothing."""
    if username == ADMIN_USER:
        return ADMIN_ROLE
    if username in set(collectors):
        return COLLECTOR_ROLE
    if username in set(vehicles):
        return VEHICLE_ROLE_PREFIX + username
    return None


def read_clients(path: Path) -> dict[str, dict[str, Any]]:
    """The clients (by username) of the file at ``path``; none when it does not exist."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise DynsecError(f"{path}: unreadable: {err}") from err
    clients = doc.get("clients") if isinstance(doc, dict) else None
    if not isinstance(clients, list):
        raise DynsecError(f"{path}: no client list")
    return {c["username"]: c for c in clients if isinstance(c, dict) and "username" in c}


def write(path: Path, clients: dict[str, dict[str, Any]], collectors: Iterable[str],
          vehicles: Iterable[str]) -> None:
    """Write the file: ``clients`` (each with its hash) given the role its name says (collector
    usernames in ``collectors``, active buses in ``vehicles``; any other client gets no role, so
    it may do nothing)."""
    collector_set, vehicle_list = set(collectors), sorted(vehicles)
    kept = []
    for name in sorted(clients):
        role = role_of(name, collector_set, vehicle_list)
        granted = [] if role is None else [{"rolename": role, "priority": 0}]
        client = {k: v for k, v in clients[name].items() if k not in ("roles", "groups")}
        kept.append({**client, "roles": granted})
    doc = {
        "defaultACLAccess": dict(DEFAULT_ACCESS),
        "clients": kept,
        "groups": [],
        "roles": roles(vehicle_list),
    }
    write_secret(path, (json.dumps(doc, indent=1) + "\n").encode())


def client(username: str, password: str, text: str) -> dict[str, Any]:
    """A new client entry (its roles are set by :func:`write`)."""
    return {"username": username, "textname": text, **password_fields(password)}
