"""Test-side pieces for the collector: a fleet file, configs, the collector as a real process, and an
agent stand-in (a real paho client) that publishes batches and collects acknowledgements."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from frota import harness
from protocols.records import Record, ms_to_ts, ts_to_ms
from protocols.uplink import Ack, decode_ack, up_topic

VEHICLES = ("ABC1D23", "XYZ9K88")
FLEET: dict[str, Any] = {
    "lines": [],
    "vehicles": [{"id": v, "seats": 46, "capacity": 46} for v in VEHICLES],
    "drivers": [],
}
T0 = ts_to_ms("2026-03-02T14:10:00.000Z")


def speed(vehicle: str, agent: str, seq: int, *, at_s: int | None = None, **extra: Any) -> Record:
    """A speed record: ts is T0 + ``at_s`` seconds (default ``seq``), kmh = seq % 100."""
    second = seq if at_s is None else at_s
    return {
        "vehicle": vehicle,
        "ts": ms_to_ts(T0 + second * 1000),
        "kind": "speed",
        "agent": agent,
        "seq": seq,
        "kmh": seq % 100,
        **extra,
    }


def write_fleet(folder: Path) -> Path:
    """The two-vehicle fleet registry in ``folder``."""
    path = folder / "fleet.json"
    path.write_text(json.dumps(FLEET))
    return path


def write_config(folder: Path, broker_url: str, http_port: int, extra: str = "") -> Path:
    """A collector.toml using fleet.json and collector.db in ``folder``."""
    config, _ = harness.write_collector_files(folder, broker_url, FLEET, http_port=http_port,
                                              extra=extra)
    return config


class CollectorProcess(harness.CollectorProcess):
    """``frota collector run`` as a real process (the harness's) on a free HTTP port, with the
    two-vehicle fleet, ``collector.toml`` and ``collector.db`` in ``folder``."""

    def __init__(self, folder: Path, broker_url: str) -> None:
        config, port = harness.write_collector_files(folder, broker_url, FLEET)
        super().__init__(config, port)
        self.folder = folder
        self.db = folder / "collector.db"


class AgentSide:
    """Publishes batch payloads like an agent and collects every ack on ``frota/v1/+/ack``."""

    def __init__(self, port: int, client_id: str = "test-agent") -> None:
        self.acks: list[tuple[str, Ack]] = []
        self.cond = threading.Condition()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(1, 2)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(10), "the test's ack subscription never completed"

    def _on_connect(self, client: mqtt.Client, *_args: Any) -> None:
        client.subscribe("frota/v1/+/ack", qos=1)

    def _on_subscribe(self, *_args: Any) -> None:
        self.subscribed.set()

    def _on_message(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        vehicle = msg.topic.split("/")[2]
        with self.cond:
            self.acks.append((vehicle, decode_ack(bytes(msg.payload))))
            self.cond.notify_all()

    def publish(self, vehicle: str, payload: bytes, topic: str | None = None) -> None:
        """Publish at QoS 1 and wait for the broker's PUBACK."""
        info = self.client.publish(topic or up_topic(vehicle), payload, qos=1)
        info.wait_for_publish(10)

    def wait_ack(
        self, vehicle: str, match: Callable[[Ack], bool] = lambda _a: True, timeout: float = 20.0
    ) -> Ack:
        """The first ack for ``vehicle`` that ``match`` accepts (removed from the list)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i, (v, ack) in enumerate(self.acks):
                    if v == vehicle and match(ack):
                        del self.acks[i]
                        return ack
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no matching ack for {vehicle}; got {self.acks}")
                self.cond.wait(left)

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()
        self.client.loop_stop()
