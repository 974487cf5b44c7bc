"""``frota provision apply``: a running broker takes the fleet's logins and roles, no restart.

Mosquitto 2.0 reads the dynamic security file only when it starts; a running broker changes its
logins and roles through the plugin's control topic (``$CONTROL/dynamic-security/v1``, the
commands ``mosquitto_ctrl dynsec`` sends). Provisioning's own login (:data:`dynsec.ADMIN_USER`,
the only one with that right) compares the broker's clients and roles with the fleet's, creates
what is missing (a new bus, a new collector: passwords from their 0600 files in the fleet's
folder), deletes what the fleet no longer has (a revoked bus: the plugin disconnects it), then
writes the fleet's file again — the broker rewrites that file after each command, and the fleet's
version (what a restart reads) must stay the one provisioning wrote. Roles are compared by name:
a role whose rules a newer Frota changed is taken at the broker's next start.
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


def _names(response: dict[str, Any], key: str) -> set[str]:
    data = response.get("data")
    items = data.get(key) if isinstance(data, dict) else None
    if response.get("error") or not isinstance(items, list):
        raise ApplyError(f"{response.get('command')}: {response.get('error', 'no list')}")
    return {item if isinstance(item, str) else str(item.get("username") or item.get("rolename"))
            for item in items}


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
    """Create the missing roles and logins, delete those the fleet no longer has; the errors."""
    listed = control.call([{"command": "listClients"}, {"command": "listRoles"}])
    have_clients, have_roles = _names(listed[0], "clients"), _names(listed[1], "roles")
    commands: list[dict[str, Any]] = []
    for name in sorted(set(roles) - have_roles):
        commands.append({"command": "createRole", **roles[name]})
    for user in sorted(set(logins) - have_clients):
        commands.append({"command": "createClient", "username": user, "textname": user,
                         "password": logins[user].read_text(),
                         "roles": [{"rolename": dynsec.role_of(user, collectors, vehicles),
                                    "priority": 0}]})
        done.created.append(user)
    for user in sorted(have_clients - set(logins)):
        commands.append({"command": "deleteClient", "username": user})
        done.deleted.append(user)
    for name in sorted(have_roles - set(roles)):
        commands.append({"command": "deleteRole", "rolename": name})
    if not commands:
        return []
    return [f"{a.get('command')}: {a['error']}" for a in control.call(commands) if a.get("error")]
