"""Several collectors, one fleet (issue 16 item 2): two ``frota collector run`` processes on one
PostgreSQL schema share ingest through an MQTT 5 shared subscription (``broker.share_group``);
``frota sim fleet`` is the fleet of agents. Every record is stored exactly once, and SIGKILLing
one collector mid-run loses nothing: its unacknowledged batches come back from the agents after
their ack timeout and land with the survivor (docs/deployment.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from collector.config import ConfigError, load_config
from frota.harness import CollectorProcess, Mosquitto, free_port, frota_argv
from frota.harness.postgres import private_schema
from protocols.uplink import UP_SUBSCRIPTION, up_subscription
from simulators.fleet import registry, vehicle_ids

VEHICLES = 6
RATE_HZ = 10.0
DURATION_S = 8.0
#: The simulated agents' batch interval (frota sim fleet's default, the agent's).
BATCH_INTERVAL_S = 1.0


@pytest.fixture
def schema_dsn(postgres_dsn: str) -> Iterator[tuple[str, str]]:
    """A fresh schema: (the DSN the collectors use, the schema's name)."""
    with private_schema(postgres_dsn) as made:
        yield made


def _collector(folder: Path, broker: str, dsn: str, name: str, group: str | None) -> CollectorProcess:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.json").write_text(json.dumps(registry(VEHICLES)), encoding="utf-8")
    port = free_port()
    shared = f'share_group = "{group}"\n' if group else ""
    config = folder / "collector.toml"
    config.write_text(
        'registry = "fleet.json"\n'
        f'[broker]\nurl = "{broker}"\nclient_id = "collector-{name}"\n{shared}'
        f'[database]\ndsn = "{dsn}"\n'
        f'[http]\nhost = "127.0.0.1"\nport = {port}\n',
        encoding="utf-8",
    )
    return CollectorProcess(config, port)


def _stored(process: CollectorProcess) -> int:
    body = process.wait_health(200)
    return sum(v["stored"] for v in body["vehicles"].values())


def _seen(process: CollectorProcess) -> list[int]:
    """Records the collector read: stored by it, or found already stored."""
    body = process.wait_health(200)
    return [sum(v["stored"] + v["duplicates"] for v in body["vehicles"].values())]


def test_share_group_subscription_and_config(tmp_path: Path) -> None:
    assert up_subscription(None) == UP_SUBSCRIPTION == "frota/v1/+/up"
    assert up_subscription("frota") == "$share/frota/frota/v1/+/up"
    for bad in ("", "a/b", "a+", "#", "x" * 65):
        with pytest.raises(ValueError):
            up_subscription(bad)
    config = tmp_path / "collector.toml"
    (tmp_path / "fleet.json").write_text(json.dumps(registry(1)), encoding="utf-8")
    config.write_text('registry = "fleet.json"\n[broker]\nshare_group = "a/b"\n',
                      encoding="utf-8")
    with pytest.raises(ConfigError, match="share_group"):
        load_config(config)


def test_mosquitto_gives_each_shared_batch_to_one_member(mosquitto: Mosquitto) -> None:
    """The broker's side of the contract the collectors rely on: in a group, each message goes
    to exactly one member (MQTT 5, 4.8.2)."""
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    clients = []
    for name in got:
        subscribed = threading.Event()
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"member-{name}",
                             protocol=MQTTProtocolVersion.MQTTv5)
        client.on_message = lambda _c, _u, msg, name=name: got[name].append(msg.payload)
        client.on_subscribe = lambda *_args, done=subscribed: done.set()
        client.connect("127.0.0.1", mosquitto.port)
        client.loop_start()
        client.subscribe(up_subscription("g"), qos=1)
        assert subscribed.wait(10)  # the SUBACK: the broker holds the member
        clients.append(client)
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="publisher")
    publisher.connect("127.0.0.1", mosquitto.port)
    publisher.loop_start()
    for i in range(20):
        publisher.publish("frota/v1/ABC1D23/up", str(i).encode(), qos=1).wait_for_publish(10)
    deadline = time.monotonic() + 10
    while len(got["a"]) + len(got["b"]) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    for client in [*clients, publisher]:
        client.disconnect()
        client.loop_stop()
    assert sorted(int(p) for p in got["a"] + got["b"]) == list(range(20))
    assert got["a"]
    assert got["b"]


def _member(port: int, name: str, got: list[int], *, manual_ack: bool) -> mqtt.Client:
    """A group member with a persistent session (MQTT 5, session expiry of an hour)."""
    subscribed = threading.Event()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name,
                         protocol=MQTTProtocolVersion.MQTTv5, manual_ack=manual_ack)
    client.on_message = lambda _c, _u, msg: got.append(int(msg.payload))
    client.on_subscribe = lambda *_args: subscribed.set()
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 3600
    client.connect("127.0.0.1", port, clean_start=False, properties=props)
    client.loop_start()
    client.subscribe(up_subscription("g"), qos=1)
    assert subscribed.wait(10)
    return client


def _wait_for(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 15
    while not done():
        assert time.monotonic() < deadline, "messages never arrived"
        time.sleep(0.05)


def test_mosquitto_keeps_a_dead_members_batches_in_its_own_session(mosquitto: Mosquitto) -> None:
    """Why a collector in a group uses a clean session (docs/deployment.md): Mosquitto keeps the
    unacknowledged messages of a member whose connection dropped in THAT member's session (no
    other member gets them) and goes on queueing a share of the new ones there."""
    a_got: list[int] = []
    b_got: list[int] = []
    a = _member(mosquitto.port, "member-a", a_got, manual_ack=True)  # receives, never PUBACKs
    b = _member(mosquitto.port, "member-b", b_got, manual_ack=False)
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="publisher")
    publisher.connect("127.0.0.1", mosquitto.port)
    publisher.loop_start()

    def publish(numbers: range) -> None:
        for i in numbers:
            publisher.publish("frota/v1/ABC1D23/up", str(i).encode(), qos=1).wait_for_publish(10)

    publish(range(10))
    _wait_for(lambda: len(a_got) + len(b_got) == 10)
    held = sorted(a_got)
    assert held  # a's share, unacknowledged
    sock = a.socket()
    assert sock is not None
    sock.close()  # a vanishes without a DISCONNECT, as a killed process does
    a.loop_stop()
    publish(range(10, 20))  # each PUBACKed: at the broker before a comes back
    a_again: list[int] = []
    back = _member(mosquitto.port, "member-a", a_again, manual_ack=False)
    _wait_for(lambda: len(a_again) + len(b_got) == 20)
    for client in (b, back, publisher):
        client.disconnect()
        client.loop_stop()
    assert not set(held) & set(b_got)  # b never got what a held
    assert set(held) <= set(a_again)  # a got it back when it came back
    assert any(n >= 10 for n in a_again)  # and new ones were queued for it while it was away
    assert sorted(b_got + a_again) == list(range(20))


def _run_fleet(broker: str, folder: Path) -> subprocess.Popen[str]:
    """``frota sim fleet`` in the background; its stdout (the JSON report) piped, stderr to
    DIR/sim.log."""
    argv = frota_argv("sim", "fleet", "--vehicles", str(VEHICLES), "--rate", str(RATE_HZ),
                      "--duration", str(DURATION_S), "--broker", broker, "--ack-timeout", "3",
                      "--drain", "60", "--json")
    with (folder / "sim.log").open("w") as log:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)


def _rows(postgres_dsn: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(postgres_dsn) as conn:
        return conn.execute(
            f"SELECT vehicle, agent, seq FROM {schema}.records".encode()).fetchall()


def test_two_collectors_share_a_fleet_and_one_killed_loses_nothing(
    mosquitto: Mosquitto, schema_dsn: tuple[str, str], postgres_dsn: str, tmp_path: Path
) -> None:
    dsn, schema = schema_dsn
    first = _collector(tmp_path / "a", mosquitto.url, dsn, "a", "frota")
    second = _collector(tmp_path / "b", mosquitto.url, dsn, "b", "frota")
    first.start()
    second.start()
    sim = _run_fleet(mosquitto.url, tmp_path)
    try:
        # Both members take batches before one dies (each batch goes to one of them).
        deadline = time.monotonic() + 30
        while (_stored(first) == 0 or _stored(second) == 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _stored(first) > 0
        assert _stored(second) > 0
        # Mid-batch, for sure: frozen, the collector still holds its connection, so the broker
        # goes on handing it its share of the batches, which it never commits; then it dies.
        os.kill(first.pid, signal.SIGSTOP)
        time.sleep(2 * BATCH_INTERVAL_S)
        first.stop(signal.SIGKILL)
        out, _ = sim.communicate(timeout=120)
    finally:
        if sim.poll() is None:
            sim.kill()
        second.stop()
    report = json.loads(out.strip().splitlines()[-1])
    print("fleet report:", report)
    expected = int(VEHICLES * RATE_HZ * DURATION_S)
    assert report["created"] == expected
    assert (report["unanswered"], report["rejected"], report["conflicts"]) == (0, 0, 0)
    assert report["stored"] == expected
    assert report["resent_batches"] > 0  # what the dead collector held came back from the agents
    rows = _rows(postgres_dsn, schema)
    assert len(rows) == expected  # each once (the store's key is vehicle, agent, seq)
    by_vehicle: dict[str, list[int]] = {}
    for vehicle, _agent, seq in rows:
        by_vehicle.setdefault(vehicle, []).append(seq)
    per_vehicle = int(RATE_HZ * DURATION_S)
    assert {v: sorted(s) for v, s in by_vehicle.items()} == {
        v: list(range(1, per_vehicle + 1)) for v in vehicle_ids(VEHICLES)
    }


def test_without_a_group_every_collector_reads_every_batch(
    mosquitto: Mosquitto, schema_dsn: tuple[str, str], postgres_dsn: str, tmp_path: Path
) -> None:
    """Today's behaviour stays the default: two collectors without ``share_group`` both read
    every batch (the store still keeps each record once)."""
    dsn, schema = schema_dsn
    first = _collector(tmp_path / "a", mosquitto.url, dsn, "a", None)
    second = _collector(tmp_path / "b", mosquitto.url, dsn, "b", None)
    first.start()
    second.start()
    argv = frota_argv("sim", "fleet", "--vehicles", "2", "--rate", "5", "--duration", "2",
                      "--broker", mosquitto.url, "--json")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["created"] == report["stored"] == 20
        deadline = time.monotonic() + 30
        while sum(_seen(first) + _seen(second)) < 2 * 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        # Each collector read all 20 records: one stored them, the other found them stored.
        assert _seen(first) + _seen(second) == [20, 20]
    finally:
        first.stop()
        second.stop()
    assert len(_rows(postgres_dsn, schema)) == 20
