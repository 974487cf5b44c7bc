"""``frota provision apply``: a running broker takes the fleet's logins and roles, no restart.

Mosquitto 2.0 reads the dynamic security file only when it starts; a running broker changes its
logins and roles through the plugin's control topic (``$CONTROL/dynamic-security/v1``, the
commands ``mosquitto_ctrl dynsec`` sends). Provisioning's own login (:data:`dynsec.ADMIN_USER`,
the only one with that right) compares the broker's clients and roles with the fleet's, creates
what is missing (a new bus, a new collector: passwords from their 0600 files in the fleet's
folder), deletes what the fleet no longer has (a revoked bus: the plugin disconnects it), then
writes the fleet's file again — the broker rewrites that file after each command, and the fleet's
version (what a restart reads) must stay the one provisioning wrote. What the broker runs is
compared by content, not only by name, and put back where it drifted (changed by hand through
the control topic, or by an older Frota): each role's ACLs, each login's roles, groups (the
fleet has none) and the default access.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from frota.provision import dynsec
from protocols.mqtt_client import MqttClient, MqttError, MqttSettings, TlsFiles

if TYPE_CHECKING:
    from frota.provision.fleet import Fleet

CONTROL_TOPIC: Final = "$CONTROL/dynamic-security/v1"
RESPONSE_TOPIC: Final = CONTROL_TOPIC + "/response"


class ApplyError(RuntimeError):
    """The broker could not be reached or refused a command; the message says which and why."""


@dataclass
class Applied:
    """What ``apply`` changed in the running broker."""

    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: What existed with other content and was put back as the fleet has it ("role NAME",
    #: "login NAME", "group NAME", "default access").
    restored: list[str] = field(default_factory=list)


class _Control:
    """One connection of provisioning's login to the broker, sending control commands and
    waiting for their answers (the plugin answers a message's commands in one response)."""

    def __init__(self, url: str, ca_file: Path, password: str, timeout: float) -> None:
        self.timeout = timeout
        self.answers: queue.Queue[Any] = queue.Queue()
        self.ready = threading.Event()
        self.refused: str | None = None
        settings = MqttSettings(url=url, client_id=dynsec.ADMIN_USER, username=dynsec.ADMIN_USER,
                                password=password, tls=TlsFiles(ca_file=ca_file),
                                clean_session=True)
        self.client = MqttClient(settings, on_connected=self._connected,
                                 on_connect_error=self._failed, on_received=self._received)
        self.client.on_subscribe = lambda *_args: self.ready.set()

    def _connected(self, _present: bool) -> None:
        self.client.subscribe(RESPONSE_TOPIC, qos=1)

    def _failed(self, reason: str, _retry_s: float) -> None:
        self.refused = reason
        self.ready.set()

    def _received(self, message: Any) -> None:
        try:
            self.answers.put(json.loads(bytes(message.payload)))
        except ValueError:
            self.answers.put(None)

    def __enter__(self) -> _Control:
        try:
            self.client.start()
        except MqttError as err:
            raise ApplyError(str(err)) from err
        if not self.ready.wait(self.timeout) or self.refused is not None:
            self.client.stop()
            raise ApplyError(f"the broker at {self.client.settings.url}: "
                             f"{self.refused or 'no answer'}")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.client.stop()

    def call(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send ``commands``; the plugin's answer to each, in order."""
        self.client.send(CONTROL_TOPIC, json.dumps({"commands": commands}).encode())
        try:
            answer = self.answers.get(timeout=self.timeout)
        except queue.Empty:
            raise ApplyError("the broker did not answer the dynamic security commands "
                             "(is its plugin loaded?)") from None
        responses = answer.get("responses") if isinstance(answer, dict) else None
        if not isinstance(responses, list) or len(responses) != len(commands):
            raise ApplyError(f"unexpected answer from the broker: {answer!r}"[:300])
        return responses


def _listed(response: dict[str, Any], key: str, name: str) -> dict[str, dict[str, Any]]:
    """The items of a verbose list answer (``clients``, ``roles``, ``groups``) by ``name``."""
    data = response.get("data")
    items = data.get(key) if isinstance(data, dict) else None
    if response.get("error") or not isinstance(items, list):
        raise ApplyError(f"{response.get('command')}: {response.get('error', 'no list')}")
    return {str(item.get(name)): item for item in items if isinstance(item, dict)}


def _acls(role: dict[str, Any]) -> set[tuple[str, str, int, bool]]:
    """A role's ACLs as (type, topic, priority, allow)."""
    return {(str(a.get("acltype")), str(a.get("topic")), int(a.get("priority", 0)),
             bool(a.get("allow"))) for a in role.get("acls") or () if isinstance(a, dict)}


def _role_fixes(name: str, want: dict[str, Any], have: dict[str, Any]) -> list[dict[str, Any]]:
    """The commands that make the broker's role ``have`` grant what the fleet's ``want`` does:
    every ACL that differs removed (the plugin keys an ACL by type and topic), then the fleet's
    added."""
    wanted, had = _acls(want), _acls(have)
    fixes: list[dict[str, Any]] = [
        {"command": "removeRoleACL", "rolename": name, "acltype": kind, "topic": topic}
        for kind, topic, _priority, _allow in sorted(had - wanted)]
    fixes += [{"command": "addRoleACL", "rolename": name, "acltype": kind, "topic": topic,
               "priority": priority, "allow": allow}
              for kind, topic, priority, allow in sorted(wanted - had)]
    return fixes


def _login_fixes(user: str, role: str | None, have: dict[str, Any]) -> list[dict[str, Any]]:
    """The commands that leave login ``user`` with the fleet's ``role`` alone (priority 0)."""
    wanted = set() if role is None else {(role, 0)}
    had = {(str(r.get("rolename")), int(r.get("priority", 0)))
           for r in have.get("roles") or () if isinstance(r, dict)}
    fixes: list[dict[str, Any]] = [
        {"command": "removeClientRole", "username": user, "rolename": name}
        for name, _priority in sorted(had - wanted)]
    fixes += [{"command": "addClientRole", "username": user, "rolename": name,
               "priority": priority} for name, priority in sorted(wanted - had)]
    return fixes


def apply(fleet: Fleet, url: str | None = None, timeout: float = 15.0) -> Applied:
    """Make the broker at ``url`` (default the fleet's) run the fleet's logins and roles."""
    from frota.provision.fleet import ensure_admin

    if fleet.dynsec_plugin is None:
        raise ApplyError("the fleet uses the password and ACL files: reload the broker (SIGHUP)")
    if ensure_admin(fleet):
        raise ApplyError("provisioning's broker login was just added: restart the broker once "
                         "(it reads new logins only when it starts); apply works after that")
    logins = fleet.login_files()
    collectors, vehicles = fleet.collector_logins(), fleet.active_vehicles()
    clients = dynsec.read_clients(fleet.dynsec_path)  # written back after the broker's saves
    roles = {r["rolename"]: r for r in dynsec.roles(vehicles)}
    password = logins[dynsec.ADMIN_USER].read_text()
    done = Applied()
    try:
        with _Control(url or fleet.broker_url, fleet.ca_cert_path, password, timeout) as control:
            errors = _sync(control, logins, roles, collectors, vehicles, done)
    finally:  # even when the broker stopped answering half-way through the commands
        fleet.write_access(clients)
    if errors:
        raise ApplyError("the broker refused: " + "; ".join(errors))
    return done


def _sync(control: _Control, logins: dict[str, Path], roles: dict[str, dict[str, Any]],
          collectors: list[str], vehicles: list[str], done: Applied) -> list[str]:
    """Create the missing roles and logins, delete those the fleet no longer has (and any
    group), put back what differs; the errors."""
    listed = control.call([{"command": "listClients", "verbose": True},
                           {"command": "listRoles", "verbose": True},
                           {"command": "listGroups", "verbose": True},
                           {"command": "getDefaultACLAccess"}])
    have_clients = _listed(listed[0], "clients", "username")
    have_roles = _listed(listed[1], "roles", "rolename")
    have_groups = _listed(listed[2], "groups", "groupname")
    have_access = _listed(listed[3], "acls", "acltype")
    commands: list[dict[str, Any]] = []
    for name in sorted(set(roles) - set(have_roles)):
        commands.append({"command": "createRole", **roles[name]})
    for name in sorted(set(roles) & set(have_roles)):
        fixes = _role_fixes(name, roles[name], have_roles[name])
        commands += fixes
        done.restored += [f"role {name}"] if fixes else []
    for group in sorted(have_groups):  # a group's roles reach its members: the fleet has none
        commands.append({"command": "deleteGroup", "groupname": group})
        done.restored.append(f"group {group}")
    for user in sorted(set(logins) - set(have_clients)):
        commands.append({"command": "createClient", "username": user, "textname": user,
                         "password": logins[user].read_text(),
                         "roles": [{"rolename": dynsec.role_of(user, collectors, vehicles),
                                    "priority": 0}]})
        done.created.append(user)
    for user in sorted(set(logins) & set(have_clients)):
        fixes = _login_fixes(user, dynsec.role_of(user, collectors, vehicles), have_clients[user])
        commands += fixes
        done.restored += [f"login {user}"] if fixes else []
    for user in sorted(set(have_clients) - set(logins)):
        commands.append({"command": "deleteClient", "username": user})
        done.deleted.append(user)
    for name in sorted(set(have_roles) - set(roles)):
        commands.append({"command": "deleteRole", "rolename": name})
    if any(have_access.get(kind, {}).get("allow") is not allow
           for kind, allow in dynsec.DEFAULT_ACCESS.items()):
        commands.append({"command": "setDefaultACLAccess", "acls": [
            {"acltype": kind, "allow": allow} for kind, allow in dynsec.DEFAULT_ACCESS.items()]})
        done.restored.append("default access")
    if not commands:
        return []
    return [f"{a.get('command')}: {a['error']}" for a in control.call(commands) if a.get("error")]
