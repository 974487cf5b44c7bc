"""Provisioned collectors share ingest (issue 16 item 2): each with its own credentials
(``frota provision collector``), over TLS, members of one MQTT 5 shared subscription as the
collector connects (``collector.ingest.mqtt_settings``); the provisioned collector role allows any
group, and a bus that tries to join the group reads nothing of other buses' batches (the dynamic
security plugin refuses its SUBSCRIBE: tests/trust/test_subscribe_acl.py)."""

from __future__ import annotations

import threading
import time

from collector.config import BrokerConfig, TLSConfig
from collector.ingest import mqtt_settings
from frota.provision import fleet as provisioning
from protocols.mqtt_client import MqttClient
from protocols.uplink import up_subscription, up_topic
from tests.trust.broker import Running, connected, provisioned_broker

A, B = "ABC1D23", "XYZ9K88"


def _member(running: Running, username: str, got: list[bytes]) -> MqttClient:
    fleet = running.fleet
    broker = BrokerConfig(url=fleet.broker_url, client_id=username, username=username,
                          password=running.password(username),
                          tls=TLSConfig(ca_file=fleet.ca_cert_path), share_group="frota")
    settings = mqtt_settings(broker)
    assert settings.mqtt5
    assert settings.clean_session
    subscribed = threading.Event()
    client = MqttClient(settings, on_received=lambda msg: got.append(bytes(msg.payload)))

    def subscribe(_present: bool) -> None:
        client.subscribe(up_subscription("frota"), qos=1)

    client.on_connected = subscribe
    client.on_subscribe = lambda *_args: subscribed.set()
    client.start()
    assert subscribed.wait(15), f"{username} never subscribed: {client.last_error}"
    return client


def test_provisioned_collectors_share_and_a_bus_in_the_group_reads_nothing() -> None:
    with provisioned_broker((A, B)) as running:
        for name in ("one", "two"):
            provisioning.add_collector(running.fleet, name)
        running.reload()  # the broker reads the new logins and ACLs (a restart, docs/trust.md)
        one: list[bytes] = []
        two: list[bytes] = []
        intruder: list[bytes] = []
        members = [_member(running, "collector-one", one), _member(running, "collector-two", two)]
        with connected(running, B, client_id="bus-b") as bus_b:
            # B may subscribe only to its own ack topic: the broker refuses its SUBSCRIBE to the
            # group, so nothing of A's reaches it.
            bus_b.client.on_message = lambda _c, _u, m: intruder.append(bytes(m.payload))
            bus_b.subscribe("$share/frota/" + "frota/v1/+/up")
            with connected(running, A, client_id="bus-a") as bus_a:
                for i in range(12):
                    bus_a.publish(up_topic(A), str(i).encode())
                deadline = time.monotonic() + 15
                while len(one) + len(two) + len(intruder) < 12 and time.monotonic() < deadline:
                    time.sleep(0.05)
                bus_a.close()
            bus_b.close()
        for member in members:
            member.stop()
    assert intruder == []  # a bus reads nothing of another bus's batches
    got = [int(p) for p in one + two]
    assert len(got) == len(set(got))  # each batch to one member at most
    assert one
    assert two
