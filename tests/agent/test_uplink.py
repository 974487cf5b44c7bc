"""The uplink against a real private Mosquitto, with a test-side responder that acks like the collector."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from agent.buffer import Buffer
from agent.uplink import Uplink
from protocols.uplink import status_topic
from tests.agent import helpers
from tests.agent.helpers import VEHICLE, config, speed
from tests.agent.responder import Responder
from tests.services import Mosquitto

pytestmark = pytest.mark.mosquitto


@pytest.fixture
def responder(mosquitto: Mosquitto) -> Iterator[Responder]:
    """A responder subscribed before the agent publishes."""
    resp = Responder(mosquitto.port)
    assert wait_until(lambda: resp.client.is_connected())
    yield resp
    resp.close()


def wait_until(cond: Callable[[], object], timeout: float = 30.0) -> bool:
    """Poll ``cond()`` until true or timeout (30 s by default here)."""
    return helpers.wait_until(cond, timeout)


def preload(path: Path, n: int, start: int = 0) -> str:
    """Put n records in the buffer; return the agent id."""
    buf = Buffer(path)
    buf.add([("reg", speed(i, device_seq=i)) for i in range(start, start + n)])
    agent = buf.agent
    buf.close()
    return agent


def pending(path: Path) -> int:
    """Records in the buffer not yet answered."""
    buf = Buffer(path)
    try:
        return buf.counts().pending
    finally:
        buf.close()


def test_backlog_is_delivered_once_and_marked_stored(
    tmp_path: Path, mosquitto: Mosquitto, responder: Responder
) -> None:
    cfg = config(tmp_path, mosquitto.url, batch_records=100)
    agent = preload(cfg.buffer.path, 1234)
    up = Uplink(cfg)
    up.start()
    try:
        assert wait_until(lambda: pending(cfg.buffer.path) == 0)
    finally:
        up.stop()
    keys = sorted(responder.records)
    assert keys == [(VEHICLE, agent, seq) for seq in range(1, 1235)]
    assert responder.deliveries == 1234
    for seq in (1, 617, 1234):
        assert responder.records[(VEHICLE, agent, seq)]["ts"] == speed(seq - 1)["ts"]


def test_rejected_records_are_kept_with_reason_and_not_resent(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    resp = Responder(mosquitto.port, reject=lambda rec: "unknown vehicle" if rec["seq"] == 3 else None)
    cfg = config(tmp_path, mosquitto.url, batch_records=10, ack_timeout_s=0.5)
    preload(cfg.buffer.path, 5)
    assert wait_until(lambda: resp.client.is_connected())
    up = Uplink(cfg)
    up.start()
    try:
        assert wait_until(lambda: pending(cfg.buffer.path) == 0)
        time.sleep(1.0)  # two ack timeouts: a rejected record must not come back
    finally:
        up.stop()
        resp.close()
    assert resp.batches == 1
    buf = Buffer(cfg.buffer.path)
    assert buf.counts().rejected == 1
    row = buf.conn.execute("SELECT state, reason FROM records WHERE seq = 3").fetchone()
    assert row == (2, "unknown vehicle")
    buf.close()


def test_an_unanswered_batch_is_sent_again(tmp_path: Path, mosquitto: Mosquitto) -> None:
    # The responder ignores the first batch it sees, as a collector that crashed before storing.
    resp = Responder(mosquitto.port, drop=lambda n: n == 1)
    cfg = config(tmp_path, mosquitto.url, batch_records=50, ack_timeout_s=0.5)
    agent = preload(cfg.buffer.path, 120)
    assert wait_until(lambda: resp.client.is_connected())
    up = Uplink(cfg)
    up.start()
    try:
        assert wait_until(lambda: pending(cfg.buffer.path) == 0)
    finally:
        up.stop()
        resp.close()
    assert sorted(resp.records) == [(VEHICLE, agent, s) for s in range(1, 121)]
    assert up.stats.resent_batches >= 1


def test_live_records_are_not_starved_by_a_backlog(tmp_path: Path, mosquitto: Mosquitto) -> None:
    order: list[int] = []
    lock = threading.Lock()

    def slow(n: int) -> bool:  # a slow collector: 20 ms per batch
        time.sleep(0.02)
        return False

    resp = Responder(mosquitto.port, drop=slow)
    original = resp._on_message

    def spy(client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        from protocols.uplink import decode_batch

        with lock:
            order.extend(int(r["seq"]) for r in decode_batch(bytes(msg.payload)).records)
        original(client, userdata, msg)

    resp.client.on_message = spy
    cfg = config(tmp_path, mosquitto.url, batch_records=20, max_in_flight=2)
    preload(cfg.buffer.path, 1200)  # 60 batches of backlog
    assert wait_until(lambda: resp.client.is_connected())
    up = Uplink(cfg)
    up.start()
    buf = Buffer(cfg.buffer.path)
    try:
        assert wait_until(lambda: len(order) > 0)
        live = buf.add([("gps", speed(5000))])[0]
        up.wake.set()
        assert wait_until(lambda: pending(cfg.buffer.path) == 0, timeout=60)
    finally:
        up.stop()
        buf.close()
        resp.close()
    # The live record went out before the backlog was done.
    assert order.index(live) < order.index(1200)


def test_status_is_retained_online_then_offline(tmp_path: Path, mosquitto: Mosquitto) -> None:
    cfg = config(tmp_path, mosquitto.url)
    seen: list[bytes] = []
    got = threading.Event()

    def on_message(client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        seen.append(bytes(msg.payload))
        got.set()

    up = Uplink(cfg)
    up.start()
    assert wait_until(lambda: up.stats.connected)
    up.stop()
    watcher = mqtt.Client(CallbackAPIVersion.VERSION2)
    watcher.on_message = on_message
    watcher.connect("127.0.0.1", mosquitto.port)
    watcher.subscribe(status_topic(VEHICLE), qos=1)
    watcher.loop_start()
    try:
        assert got.wait(10)
    finally:
        watcher.disconnect()
        watcher.loop_stop()
    assert b'"status":"offline"' in seen[-1]
    assert up.agent.encode() in seen[-1]


def test_records_survive_a_broker_restart(
    tmp_path: Path, mosquitto: Mosquitto, responder: Responder
) -> None:
    cfg = config(tmp_path, mosquitto.url, batch_records=100, ack_timeout_s=1.0)
    agent = preload(cfg.buffer.path, 300)
    up = Uplink(cfg)
    up.start()
    try:
        assert wait_until(lambda: pending(cfg.buffer.path) == 0)
        mosquitto.stop()
        buf = Buffer(cfg.buffer.path)
        buf.add([("reg", speed(i, device_seq=i)) for i in range(300, 500)])  # while the broker is down
        buf.close()
        time.sleep(0.5)
        mosquitto.start()
        assert wait_until(lambda: pending(cfg.buffer.path) == 0)
    finally:
        up.stop()
    assert sorted(responder.records) == [(VEHICLE, agent, s) for s in range(1, 501)]
