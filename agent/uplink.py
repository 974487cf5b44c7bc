"""The uplink: pending records from the buffer → MQTT batches; the collector's acks → upload state.

paho-mqtt 2.x, QoS 1, a persistent session (``clean_session=False``), a retained ``offline`` last
will and a retained ``online`` on every connect, TLS for ``mqtts://``. A broker's PUBACK is not
trusted: a record is uploaded only when the collector's :class:`~protocols.uplink.Ack` says it is
*stored* (or *rejected*, with a reason, never resent). A batch not answered within
``ack_timeout_s`` is sent again, then after longer and longer waits (capped exponential backoff
with jitter, ``agent/flights.py``) until the collector answers; the collector stores each record
once.

Backlog policy (``firmware-notes/mqtt.md``): at every connect the records already pending become
the *backlog*; newer ones are *live*. Each send round first sends the live records (a full batch,
or whatever waited ``batch_interval_ms``), then fills the window of ``max_in_flight`` unanswered
batches from the oldest backlog. Live data never waits behind a three-day backlog.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

import paho.mqtt.client as mqtt

from agent.acks import AckGate
from agent.buffer import Buffer, BufferError
from agent.checkpoints import CheckpointSigner
from agent.config import AgentConfig
from agent.flights import Flights, ResendBackoff
from protocols.identity import load_signing_key
from protocols.mqtt_client import MqttClient, MqttError, MqttSettings, TlsFiles, Will, make_client
from protocols.uplink import (
    MAX_PAYLOAD_BYTES,
    Ack,
    ack_topic,
    encode_batch_json,
    encode_status,
    mask_url,
    status_topic,
    up_topic,
)

log = logging.getLogger(__name__)

#: Longest the uplink thread sleeps when nothing wakes it (seconds).
IDLE_WAIT_S = 0.5


def mqtt_settings(config: AgentConfig, agent: str) -> MqttSettings:
    """How the agent connects: its broker section, its client id, and a retained ``offline`` will."""
    broker = config.broker
    user, password = broker.credentials()
    tls = broker.tls
    return MqttSettings(
        url=broker.url,
        client_id=config.client_id,
        username=user,
        password=password,
        tls=TlsFiles(tls.ca_file, tls.cert_file, tls.key_file, tls.insecure),
        will=Will(status_topic(config.vehicle), encode_status(config.vehicle, agent, "offline")),
        keepalive_s=broker.keepalive_s,
        clean_session=False,
        max_inflight=max(20, config.uplink.max_in_flight * 2),
    )


@dataclass
class UplinkStats:
    """Counters for the agent's status and the demo."""

    connected: bool = False
    connects: int = 0
    batches_sent: int = 0
    records_sent: int = 0
    resent_batches: int = 0
    stored: int = 0
    rejected: int = 0
    conflicts: int = 0
    last_ack_mono: float | None = None
    bytes_sent: int = 0
    flights: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class Uplink:
    """Moves pending records to the collector and records its answers; one thread plus paho's."""

    def __init__(self, config: AgentConfig, wake: threading.Event | None = None) -> None:
        self.config = config
        self.vehicle = config.vehicle
        self.buffer = Buffer(config.buffer.path)
        self.agent = self.buffer.agent
        self.wake = wake or threading.Event()
        self.stats = UplinkStats()
        ident = config.identity
        self.gate = AckGate(self.agent, ident.ca_file if ident is not None else None)
        self.signing_key = load_signing_key(ident.key_file) if ident is not None else None
        #: Checkpoints per batch and per minute (agent/checkpoints.py); None: nothing is signed.
        self.checkpoints = (CheckpointSigner(self.signing_key, self.vehicle, self.agent)
                            if self.signing_key is not None else None)
        self._acks: queue.Queue[Ack] = queue.Queue()
        self._connected_gen = 0  # bumped by every successful connect (paho's thread)
        self._seen_gen = 0
        #: The buffer's replay count last seen (``frota agent replay``; agent/buffer.py).
        self._replay_gen = self.buffer.replay_gen()
        self._stop = threading.Event()
        self._flights = Flights(ResendBackoff(config.uplink.ack_timeout_s,
                                              config.uplink.resend_max_s))
        self._live_floor = 0
        self._live_cursor = 0
        self._backlog_cursor = 0
        self._live_waiting_since: float | None = None
        self._draining = False
        self._thread = threading.Thread(target=self._run, name="uplink", daemon=True)
        self._network: threading.Thread | None = None
        self.client = self._make_client()

    # -- MQTT ------------------------------------------------------------------------------
    def _make_client(self) -> MqttClient:
        return make_client(
            mqtt_settings(self.config, self.agent),
            on_connected=self._on_connect,
            on_connect_error=self._on_connect_error,
            on_lost=self._on_lost,
            on_received=self._on_message,
        )

    def _on_connect(self, session_present: bool) -> None:
        client = self.client
        client.subscribe(ack_topic(self.vehicle), qos=1)
        try:
            client.send(status_topic(self.vehicle), encode_status(self.vehicle, self.agent, "online"),
                        qos=1, retain=True)
        except MqttError as err:
            log.warning("status not published: %s", err)
        self.stats.connected = True
        self.stats.connects += 1
        self._connected_gen += 1
        log.info(
            "connected to %s (session present: %s)", mask_url(self.config.broker.url), session_present
        )
        self.wake.set()

    def _on_connect_error(self, reason: str, retry_in_s: float) -> None:
        log.warning("cannot connect to broker %s: %s (retrying in %.0f s)",
                    mask_url(self.config.broker.url), reason, retry_in_s)

    def _on_lost(self, reason: str) -> None:
        if self.stats.connected and not self._stop.is_set():
            log.warning("disconnected from the broker: %s", reason)
        self.stats.connected = False

    def _on_message(self, msg: mqtt.MQTTMessage) -> None:
        # paho's thread: nothing may raise out of here (agent/acks.py reads the ack).
        ack = self.gate.read(msg.topic, bytes(msg.payload))
        if ack is not None:
            self._acks.put(ack)
            self.wake.set()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Connect (in the background, retrying) and start the send loop."""
        self.client.start()
        # paho's network thread (a private attribute: paho has no public handle on it)
        self._network = getattr(self.client, "_thread", None)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """True while the send loop and paho's network thread run (the watchdog's condition:
        a dead network thread would leave the agent "connected" and silent for good)."""
        network = self._network
        return self._thread.is_alive() and (network is None or network.is_alive())

    def drain(self, timeout: float) -> bool:
        """Send everything pending now, without waiting for fuller batches; True if all answered."""
        self._draining = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.stats.connected:
            if self.backlog() == 0:
                return True
            self.wake.set()
            time.sleep(0.05)
        return self.backlog() == 0

    def stop(self, timeout: float = 10.0) -> None:
        """Stop sending, say ``offline`` (retained) and disconnect."""
        self._stop.set()
        self.wake.set()
        self._thread.join(timeout)
        if self.stats.connected:
            with contextlib.suppress(MqttError, RuntimeError, ValueError):
                info = self.client.send(
                    status_topic(self.vehicle),
                    encode_status(self.vehicle, self.agent, "offline"),
                    qos=1,
                    retain=True,
                )
                info.wait_for_publish(timeout=2.0)
        self.client.stop()
        self.buffer.close()

    # -- the send loop ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self.wake.wait(IDLE_WAIT_S)
            self.wake.clear()
            try:
                self._round()
            except BufferError as err:
                log.error("uplink: %s", err)
                time.sleep(1.0)
            except Exception:
                # A bug: say so and end the thread; the agent stops pinging the watchdog and
                # systemd restarts it (nothing is lost: the buffer holds every record).
                log.exception("uplink: unexpected error; the send loop stops")
                raise

    def _round(self) -> None:
        """Apply acks, sign the minute's checkpoint if owed, start over after a reconnect,
        resend late batches, fill the window, send a held checkpoint."""
        self._apply_acks()
        if self.checkpoints is not None:
            self.checkpoints.tick(self.buffer)
        if not self.stats.connected:
            return
        replay = self.buffer.replay_gen()
        if self._connected_gen != self._seen_gen or replay != self._replay_gen:
            # a new connection, or records made pending again by frota agent replay
            self._seen_gen, self._replay_gen = self._connected_gen, replay
            # Everything pending now is backlog; batches in flight stay tracked (and are resent
            # after their timeout if the broker lost them).
            self._live_floor = self.buffer.last_seq()
            self._live_cursor = self._live_floor
            self._backlog_cursor = 0
            self._live_waiting_since = None
            self._flights.reconnected()
        self._resend_late()
        self._send_live()
        self._send_backlog()
        self._send_held_checkpoint()

    def _send_held_checkpoint(self) -> None:
        """The timer's checkpoint no batch carried, sent alone (a batch with no records)."""
        signer = self.checkpoints
        if signer is None or signer.held is None:
            return
        payload = encode_batch_json(self.vehicle, self.agent, [],
                                    compress=self.config.uplink.compress, checkpoint=signer.held)
        try:
            self.client.send(up_topic(self.vehicle), payload, qos=1)
        except MqttError as err:
            log.info("%s: the held checkpoint is sent later", err)
            return
        signer.held = None
        self.stats.batches_sent += 1
        self.stats.bytes_sent += len(payload)

    def _apply_acks(self) -> None:
        """Record every ack that has arrived and names what this agent sent (agent/acks.py),
        in one buffer transaction."""
        stored: list[tuple[int, int]] = []
        rejected: list[tuple[int, int, str]] = []
        retryable: list[bool] = []
        conflicts: list[int] = []
        while True:
            try:
                ack = self.gate.bind(self._acks.get_nowait(), self.buffer)
            except queue.Empty:
                break
            if ack.replay:  # the collector's answer may have changed: retryable rejects again
                again = self.buffer.replay_rejected()
                if again:
                    log.info("collector announced a change: %d retryable rejected records sent "
                             "again", again)
            stored.extend(ack.stored)
            rejected.extend(ack.rejected)
            retryable.extend(ack.retryable)
            conflicts.extend(ack.conflicts)
        if not stored and not rejected and not conflicts:
            return
        self.buffer.mark(stored, rejected, conflicts, retryable)
        self.stats.conflicts += len(conflicts)
        for seq in conflicts:
            log.warning("collector holds another record as seq %d: kept apart, not sent again", seq)
        self._flights.answered(stored + [(a, b) for a, b, _ in rejected]
                               + [(s, s) for s in conflicts])
        self.stats.stored += sum(b - a + 1 for a, b in stored)
        self.stats.rejected += sum(b - a + 1 for a, b, _ in rejected)
        for first, last, reason in rejected:
            log.warning("collector rejected seq %d-%d: %s", first, last, reason)
        self.stats.last_ack_mono = time.monotonic()

    def _room(self, lane: str = "live") -> bool:
        limit = self.config.uplink.max_in_flight
        if lane == "backlog" and limit > 1:
            limit -= 1  # one slot is always kept for live records
        return len(self._flights) < limit

    def _resend_late(self) -> None:
        """Send again what is still pending of the batches whose wait is over (agent/flights.py:
        the waits grow while the collector does not answer)."""
        now = time.monotonic()
        for flight in self._flights.late(now):
            rows = self.buffer.pending_of(flight.seqs)
            if rows:
                self.stats.resent_batches += 1
                log.info("no answer for %d records after %.1f s: sending again (next wait up to "
                         "%.0f s)", len(rows), now - flight.sent_at, self._flights.backoff.ceiling())
                self._publish(rows, "resend", flight.attempt + 1)

    def _send_live(self) -> None:
        cfg = self.config.uplink
        if not self._room():
            return
        rows = self.buffer.pending(self._live_cursor, cfg.batch_records)
        if not rows:
            self._live_waiting_since = None
            return
        now = time.monotonic()
        if self._live_waiting_since is None:
            self._live_waiting_since = now
        full = len(rows) >= cfg.batch_records
        waited = (now - self._live_waiting_since) * 1000
        if not full and not self._draining and waited < cfg.batch_interval_ms:
            return
        self._live_cursor = rows[-1][0]
        self._live_waiting_since = None
        self._publish(rows, "live")

    def _send_backlog(self) -> None:
        cfg = self.config.uplink
        while self._room("backlog") and self._backlog_cursor < self._live_floor:
            busy = self._flights.seqs()
            nxt = self.buffer.pending(self._backlog_cursor, cfg.batch_records, upto=self._live_floor)
            rows = [row for row in nxt if row[0] not in busy]
            if not rows:
                # Either nothing is left or everything left is in flight: done for this round.
                if not nxt:
                    self._backlog_cursor = self._live_floor
                else:
                    self._backlog_cursor = nxt[-1][0]
                continue
            self._backlog_cursor = rows[-1][0]
            self._publish(rows, "backlog")

    def _checkpoint(self, rows: list[tuple[int, str]]) -> dict[str, object] | None:
        """The signed checkpoint of the chain at the batch's last seq (docs/trust.md)."""
        if self.checkpoints is None or not rows:
            return None
        last = max(seq for seq, _ in rows)
        digest = self.buffer.hashes([last]).get(last)
        if digest is None:
            return None
        return self.checkpoints.for_batch(last, digest)

    def _publish(self, rows: list[tuple[int, str]], lane: str, attempt: int = 0) -> None:
        """Send rows as one batch with its checkpoint (split if the payload would be too large)
        and track it."""
        payload = encode_batch_json(
            self.vehicle,
            self.agent,
            [body for _, body in rows],
            compress=self.config.uplink.compress,
            checkpoint=self._checkpoint(rows),
        )
        if len(payload) > MAX_PAYLOAD_BYTES and len(rows) > 1:
            half = len(rows) // 2
            self._publish(rows[:half], lane, attempt)
            self._publish(rows[half:], lane, attempt)
            return
        try:
            self.client.send(up_topic(self.vehicle), payload, qos=1)
        except MqttError as err:
            log.info("%s: will resend after the ack timeout", err)
        self._flights.sent({s for s, _ in rows}, lane, attempt)
        self.stats.batches_sent += 1
        self.stats.records_sent += len(rows)
        self.stats.bytes_sent += len(payload)
        self.stats.flights = len(self._flights)

    def backlog(self) -> int:
        """Records not yet answered by the collector (from the buffer)."""
        return self.buffer.pending_count()
