"""A small test-side collector stand-in: subscribes to every vehicle's batches and acks them.

Real paho client against the real private Mosquitto; it stores records in memory by
(vehicle, agent, seq) and answers like the collector (stored ranges, rejected ranges, each bound to the chain hash of
its last record).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocols.chain import record_hash
from protocols.uplink import (
    UP_SUBSCRIPTION,
    Ack,
    PayloadError,
    ack_topic,
    decode_batch,
    encode_ack,
    seq_ranges,
    vehicle_of_topic,
)


class Responder:
    """Acks every record it receives, except those ``reject`` names and batches ``drop`` eats."""

    def __init__(
        self,
        port: int,
        reject: Callable[[dict[str, Any]], str | None] | None = None,
        drop: Callable[[int], bool] | None = None,
    ) -> None:
        self.records: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.deliveries = 0
        self.batches = 0
        self.rejected: dict[int, str] = {}
        self.reject = reject
        self.drop = drop
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="test-responder")
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_connect(self, client: mqtt.Client, *args: Any) -> None:
        client.subscribe(UP_SUBSCRIPTION, qos=1)

    def _on_message(self, client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        vehicle = vehicle_of_topic(msg.topic)
        try:
            batch = decode_batch(bytes(msg.payload))
        except PayloadError:
            return
        with self.lock:
            self.batches += 1
            if self.drop is not None and self.drop(self.batches):
                return
            stored: list[int] = []
            rejected: list[tuple[int, int, str]] = []
            for rec in batch.records:
                seq = int(rec["seq"])
                why = self.reject(rec) if self.reject is not None else None
                if why is not None:
                    self.rejected[seq] = why
                    rejected.append((seq, seq, why))
                    continue
                self.deliveries += 1
                self.records[(str(vehicle), batch.agent, seq)] = rec
                stored.append(seq)
            self.changed.notify_all()
        ack = Ack(agent=batch.agent, stored=seq_ranges(stored), rejected=rejected)
        # Bound to content, as the collector's: the chain hash of the last record of each range.
        hashes = {int(rec["seq"]): record_hash(rec) for rec in batch.records}
        ack.hashes = {b: hashes[b] for _, b in ack.stored} | {b: hashes[b] for _, b, _ in rejected}
        client.publish(ack_topic(batch.vehicle), encode_ack(ack), qos=1)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Wait until ``predicate()`` holds (checked under the lock after each delivery)."""
        with self.lock:
            return self.changed.wait_for(predicate, timeout)

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()
        self.client.loop_stop()
