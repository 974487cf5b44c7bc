"""A provisioned fleet and its real Mosquitto for the trust tests; a small synchronous MQTT client."""

from __future__ import annotations

import os
import pwd
import queue
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from frota.provision import fleet as provisioning
from tests.services import free_port, mosquitto_binary, require, stop_process, wait_port


def broker_user() -> str:
    """The user the provisioned broker runs as: ``mosquitto`` as root (as in production), else
    whoever runs the tests (mosquitto only switches users when started as root)."""
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("mosquitto")
            return "mosquitto"
        except KeyError:
            return "root"
    return pwd.getpwuid(os.geteuid()).pw_name


@contextmanager
def fleet_folder() -> Iterator[Path]:
    """A fresh folder the broker's user can reach (pytest's tmp_path is 0700 under root's
    private folder, which the ``mosquitto`` user cannot enter)."""
    folder = Path(tempfile.mkdtemp(prefix="frota-fleet-"))
    os.chmod(folder, 0o755)
    try:
        yield folder / "fleet"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Running:
    """A provisioned fleet with its broker running."""

    fleet: provisioning.Fleet
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def port(self) -> int:
        return self.fleet.port

    def password(self, username: str) -> str:
        if username.startswith(provisioning.COLLECTOR_PREFIX):
            name = username.removeprefix(provisioning.COLLECTOR_PREFIX)
            return (self.fleet.folder / "collectors" / name / "password").read_text()
        return (self.fleet.folder / "vehicles" / username / "password").read_text()

    def reload(self) -> None:
        """Make the broker read the provisioned logins and ACLs again, as docs/trust.md says:
        a restart for the dynamic security file (Mosquitto 2.0 reads it only when it starts),
        SIGHUP for the password file and ACL file."""
        if self.fleet.dynsec_plugin is None:
            self.proc.send_signal(signal.SIGHUP)
            return
        stop_process(self.proc, signal.SIGTERM, 5)
        self.proc = _start(self.fleet, self.log)
        wait_port(self.port)


def _start(fleet: provisioning.Fleet, log: Path) -> subprocess.Popen[bytes]:
    binary = mosquitto_binary()
    assert binary is not None
    with log.open("ab") as out:
        return subprocess.Popen([binary, "-c", str(fleet.mosquitto / "mosquitto.conf")],
                                stdout=out, stderr=subprocess.STDOUT)


@contextmanager
def provisioned_broker(vehicles: tuple[str, ...] = ("ABC1D23", "XYZ9K88"),
                       acl_file: bool = False) -> Iterator[Running]:
    """``frota provision init`` + ``vehicle`` for each id, then Mosquitto on that configuration
    (its dynamic security plugin, which must be installed with it; ``acl_file``: the password
    file and ACL file instead)."""
    binary = mosquitto_binary()
    require(binary is not None, "mosquitto is not installed (apt-get install mosquitto)")
    with fleet_folder() as folder:
        made = provisioning.init(folder, hosts=["127.0.0.1"], port=free_port(), bind="127.0.0.1",
                                 broker_user=broker_user(), persistence=False, acl_file=acl_file)
        assert acl_file or made.dynsec_plugin is not None, "Mosquitto without its dynsec plugin"
        for vehicle in vehicles:
            provisioning.add_vehicle(made, vehicle, str(folder / f"{vehicle}.sqlite"))
        running = Running(made, _start(made, folder.parent / "mosquitto.log"),
                          folder.parent / "mosquitto.log")
        try:
            wait_port(made.port)
            yield running
        finally:
            stop_process(running.proc, signal.SIGTERM, 5)


class Client:
    """A paho client that reports its CONNACK, disconnects and messages through queues."""

    def __init__(self, port: int, ca: Path | None, username: str | None, password: str | None,
                 client_id: str = "", tls: bool = True) -> None:
        self.connacks: queue.Queue[Any] = queue.Queue()
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.disconnected = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=mqtt.MQTTv311)
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls:
            self.client.tls_set(ca_certs=str(ca) if ca else None, cert_reqs=ssl.CERT_REQUIRED)
        self.client.on_connect = lambda c, u, f, rc, p: self.connacks.put(rc)
        self.client.on_disconnect = lambda c, u, f, rc, p: self.disconnected.set()
        self.client.on_message = lambda c, u, m: self.messages.put((m.topic, bytes(m.payload)))
        self.port = port

    def connect(self, timeout: float = 10.0) -> Any:
        """Connect; the CONNACK's reason code (``is_failure`` when refused)."""
        self.client.connect("127.0.0.1", self.port, keepalive=30)
        self.client.loop_start()
        return self.connacks.get(timeout=timeout)

    def subscribe(self, topic: str) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda c, u, mid, rcs, p: done.set()
        self.client.subscribe(topic, qos=1)
        assert done.wait(10)

    def suback(self, topic: str) -> Any:
        """Subscribe to ``topic``; the broker's SUBACK reason code for it (``is_failure`` when
        refused: 0x80 in MQTT 3.1.1)."""
        codes: queue.Queue[Any] = queue.Queue()
        self.client.on_subscribe = lambda c, u, mid, rcs, p: codes.put(rcs[0])
        self.client.subscribe(topic, qos=1)
        return codes.get(timeout=10)

    def publish(self, topic: str, payload: bytes) -> None:
        info = self.client.publish(topic, payload, qos=1)
        info.wait_for_publish(10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@contextmanager
def connected(running: Running, username: str | None, client_id: str = "") -> Iterator[Client]:
    """A client logged in as ``username`` (with its provisioned password), connected."""
    password = running.password(username) if username else None
    client = Client(running.port, running.fleet.ca_cert_path, username, password, client_id)
    reason = client.connect()
    assert not reason.is_failure, f"{username} refused: {reason}"
    try:
        yield client
    finally:
        client.close()
