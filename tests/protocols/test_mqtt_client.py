"""The one MQTT client (protocols/mqtt_client.py) against a real private Mosquitto: one error type,
and reasons in words for a failed connection and a lost one."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pytest

from protocols.mqtt_client import MqttError, MqttSettings, TlsFiles, Will, make_client
from tests.services import Mosquitto, free_port, mosquitto_binary, require

pytestmark = pytest.mark.mosquitto


def test_unreadable_tls_files_raise_the_one_error(tmp_path: Path) -> None:
    bad_ca = tmp_path / "ca.crt"
    bad_ca.write_text("not a certificate\n")
    settings = MqttSettings("mqtts://127.0.0.1:8883", "c1", tls=TlsFiles(ca_file=bad_ca))
    with pytest.raises(MqttError, match=r"broker\.tls: cannot load the TLS files"):
        make_client(settings)
    missing = MqttSettings("mqtts://127.0.0.1:8883", "c1", tls=TlsFiles(ca_file=tmp_path / "none"))
    with pytest.raises(MqttError):
        make_client(missing)


def test_settings_read_the_url() -> None:
    assert MqttSettings("mqtt://broker.example", "c").port == 1883
    assert MqttSettings("mqtts://broker.example", "c").port == 8883
    tls = MqttSettings("mqtts://broker.example:9999", "c")
    assert (tls.host, tls.port, tls.uses_tls) == ("broker.example", 9999, True)


def test_a_refused_connection_is_said_in_words_with_the_backoff() -> None:
    port = free_port()  # nothing listens there
    errors: queue.Queue[tuple[str, float]] = queue.Queue()
    client = make_client(
        MqttSettings(f"mqtt://127.0.0.1:{port}", "refused"),
        on_connect_error=lambda reason, retry: errors.put((reason, retry)),
    )
    client.start()
    try:
        first = errors.get(timeout=10)
        second = errors.get(timeout=10)
    finally:
        client.stop()
    # paho's backoff: 1 s after the first failure, doubled after the second (RECONNECT_MIN_S = 1).
    assert first == ("connection refused", 1.0)
    assert second == ("connection refused", 2.0)
    assert client.last_error == "connection refused"


def test_a_broker_that_goes_away_is_a_closed_connection_not_an_unspecified_error(
    mosquitto: Mosquitto,
) -> None:
    connected = threading.Event()
    lost: queue.Queue[str] = queue.Queue()
    client = make_client(
        MqttSettings(mosquitto.url, "goes-away", will=Will("t/status", b"offline")),
        on_connected=lambda _session: connected.set(),
        on_lost=lost.put,
    )
    client.start()
    try:
        assert connected.wait(10)
        mosquitto.stop()
        reason = lost.get(timeout=10)
    finally:
        client.stop()
    assert reason in ("connection closed by the broker", "connection reset by peer")
    assert "Unspecified" not in reason


def test_a_message_paho_refuses_raises_the_one_error(mosquitto: Mosquitto) -> None:
    connected = threading.Event()
    client = make_client(
        MqttSettings(mosquitto.url, "refuses"), on_connected=lambda _session: connected.set()
    )
    with pytest.raises(MqttError, match="cannot publish"):
        client.send("a/+/wildcard", b"x")  # wildcards are not allowed in a topic published to
    with pytest.raises(MqttError, match="cannot publish"):
        client.send("a/b", b"x", qos=0)  # not connected: QoS 0 is dropped, which is an error
    client.send("a/b", b"x", qos=1)  # not connected: QoS 1 is kept for the connection
    client.start()
    try:
        assert connected.wait(10)
        client.send("a/b", b"x", qos=1).wait_for_publish(timeout=5)
    finally:
        client.stop()


def test_a_broker_that_refuses_the_login_is_said(tmp_path: Path) -> None:
    require(mosquitto_binary() is not None, "mosquitto is not installed (apt-get install mosquitto)")
    broker = Mosquitto(tmp_path)
    broker.conf.write_text(broker.conf.read_text().replace("allow_anonymous true", "allow_anonymous false"))
    broker.start()
    errors: queue.Queue[tuple[str, float]] = queue.Queue()
    client = make_client(
        MqttSettings(broker.url, "anon"),
        on_connect_error=lambda reason, retry: errors.put((reason, retry)),
    )
    client.start()
    try:
        reason, _retry = errors.get(timeout=10)
    finally:
        client.stop()
        broker.stop()
    assert reason.startswith("refused by the broker: ")
    assert "Not authorized" in reason
