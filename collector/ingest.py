"""MQTT ingest: agents' batches → validated records in the store → end-to-end acknowledgements.

A paho-mqtt 2.x client with a fixed client id and a persistent session (clean_session False)
subscribes at QoS 1 to every vehicle's ``up`` and ``status`` topics. paho's thread decodes each
batch and checks every record (:mod:`collector.intake`); one worker thread then stores the valid
records and the rejects in ONE transaction and, only after the commit, publishes the
:class:`~protocols.uplink.Ack` (QoS 1) and PUBACKs the message (manual acks, so a collector that
dies before its commit gets the batch again from the broker) — in arrival order, through a short
bounded queue, so reading the next batch overlaps with the database work of this one. Nothing
raises out of either thread: a payload that cannot be read becomes a row in ``rejects`` and, where
the agent and its seqs can be read, a negative acknowledgement. The work per message is bounded by
the payload limits of :mod:`protocols.uplink`.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import paho.mqtt.client as mqtt

from collector.config import BrokerConfig
from collector.intake import UNKNOWN_VEHICLE, Prepared, prepare
from collector.readers import READ_LIMIT_S, BatchReaders, Known, Read, Reading, read_batch
from collector.signer import AckSigner
from collector.store import Reject, Store, StoreError
from collector.store_chain import ChainPart
from protocols.evaluated import EVALUATED_TOPIC, encode_evaluated, notice_of
from protocols.mqtt_client import MqttClient, MqttError, MqttSettings, TlsFiles, make_client
from protocols.records import MAX_SAFE_INT, ms_to_ts, now_ms
from protocols.uplink import (
    MAX_PAYLOAD_BYTES,
    TOPIC_ROOT,
    UP_SUBSCRIPTION,
    Ack,
    ack_topic,
    encode_ack,
    mask_url,
    seq_ranges,
    up_subscription,
    vehicle_of_topic,
)

log = logging.getLogger(__name__)

STATUS_SUBSCRIPTION: Final = f"{TOPIC_ROOT}/+/status"
#: Batches read but not yet committed: bounds memory, and paho's thread waits when it is full.
QUEUE_DEPTH: Final = 128
#: At most this many queued batches are committed in one transaction (a group commit: each kind
#: of row of the whole group in one statement on PostgreSQL), and at most GROUP_RECORDS records.
GROUP: Final = 128
GROUP_RECORDS: Final = 5_000


@dataclass
class VehicleLive:
    """What the running collector has seen of one vehicle (since it started, plus the store)."""

    agent: str | None = None
    status: str | None = None
    status_ms: int | None = None
    last_ts_ms: int | None = None
    last_received_ms: int | None = None
    batches: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    acks: int = 0


@dataclass
class IngestState:
    """Counters and per-vehicle state shared with the HTTP thread (guarded by ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    connected: bool = False
    #: The broker acknowledged the subscriptions of the current connection (SUBACK): batches
    #: published from now on reach this collector even on a new session.
    subscribed: bool = False
    connected_ms: int | None = None
    disconnected_reason: str | None = None
    rejects_total: int = 0
    vehicles: dict[str, VehicleLive] = field(default_factory=dict)
    #: Messages on the topics of vehicles neither in the registry nor in the store: counted,
    #: not kept per vehicle (anyone may publish on any topic; memory stays bounded).
    unknown_vehicle_messages: int = 0
    #: Status payloads that could not be read (logged and dropped).
    unreadable_status: int = 0

    def vehicle(self, vehicle: str) -> VehicleLive:
        """The entry of ``vehicle``, created empty if new (call with ``lock`` held)."""
        live = self.vehicles.get(vehicle)
        if live is None:
            live = self.vehicles[vehicle] = VehicleLive()
        return live


def mqtt_settings(broker: BrokerConfig) -> MqttSettings:
    """How the collector connects: its broker section, a persistent session, manual PUBACKs
    (sent only after the commit), no limit on what paho queues while disconnected.

    A member of a shared-subscription group (``broker.share_group``) speaks MQTT 5 with a CLEAN
    session instead. Mosquitto 2 keeps the unacknowledged batches of a member that vanished in
    that member's session and never hands them to another member; with a persistent session it
    also goes on queueing every other new batch for the dead member until it comes back
    (measured, docs/deployment.md). A clean session makes the broker drop the dead member at
    once, so the live ones get every new batch; the batches it held unacknowledged are sent
    again by their agents after ``uplink.ack_timeout_s`` (acks only after the commit), and the
    store keeps each record once."""
    tls = broker.tls
    shared = broker.share_group is not None
    return MqttSettings(
        url=broker.url,
        client_id=broker.client_id,
        username=broker.username,
        password=broker.secret(),
        tls=TlsFiles(tls.ca_file, tls.cert_file, tls.key_file, tls.insecure),
        keepalive_s=broker.keepalive_s,
        clean_session=shared,
        manual_ack=True,
        mqtt5=shared,
        max_inflight=100,
        max_queued=0,
    )


class Ingest:
    """Turns batch payloads into stored records, rejects and acks; owns the MQTT client."""

    def __init__(
        self,
        store: Store,
        known_vehicles: Callable[[], frozenset[str]],
        *,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        signer: AckSigner | None = None,
        readers: int = 0,
        read: Read = read_batch,
        read_limit_s: float = READ_LIMIT_S,
    ) -> None:
        self.store = store
        #: Reader processes for the batches (collector/readers.py; 0: read in paho's thread).
        self.readers = readers
        self._readers: BatchReaders | None = None
        self._read_fn = read
        #: Seconds a reader process may take over one batch (collector/readers.py).
        self.read_limit_s = read_limit_s
        #: Signs every acknowledgement (a provisioned collector's key, collector/signer.py).
        self.signer = signer
        self.known_vehicles = known_vehicles
        self.max_payload_bytes = max_payload_bytes
        self.state = IngestState()
        self.client: MqttClient | None = None
        self._broker_url = ""
        self._client_id: str | None = None
        self._up_subscription = UP_SUBSCRIPTION
        self._closing = False
        self._subscribe_mid: int | None = None
        #: Set once the worker has stopped: a message arriving after that is not queued.
        self._worker_done = False
        self._queue: queue.Queue[Queued | None] = queue.Queue(maxsize=QUEUE_DEPTH)
        self._worker: threading.Thread | None = None
        #: Held while a group is answered and while a replay notice is sent (:meth:`announce`):
        #: a batch refused for an unknown vehicle is answered before the notice or checked
        #: again after it, never refused behind it.
        self._answering = threading.RLock()
        self._load_state()

    def _load_state(self) -> None:
        with self.state.lock:
            self.state.rejects_total = self.store.reject_count()
            for known in self.store.vehicles():
                live = self.state.vehicle(known.vehicle)
                live.agent = known.agent
                live.last_ts_ms = known.last_ts_ms
                live.last_received_ms = known.last_received_ms

    # -- payload in, ack out -----------------------------------------------------------------
    def handle(self, topic: str, payload: bytes) -> tuple[str, Ack] | None:
        """Process one batch payload; return (vehicle, ack) to publish, or None when no agent
        can be told. Raises only StoreError (the database failed: nothing was committed)."""
        return self._commit(self._prepare(topic, payload))

    def _prepare(self, topic: str, payload: bytes) -> Prepared:
        return prepare(topic, payload, self.known_vehicles, now_ms(), self.max_payload_bytes)

    def _commit(self, prepared: Prepared) -> tuple[str, Ack] | None:
        """Store what ``prepared`` holds in one transaction, then count it; the ack to publish."""
        return self._commit_many([prepared])[0]

    def _commit_many(self, group: list[Prepared]) -> list[tuple[str, Ack] | None]:
        """Store several prepared batches in ONE transaction; their acks, in order."""
        counts = self.store.put_many(
            [(p.rows, p.rejects, p.state_rows) for p in group], [p.chain for p in group]
        )
        return [self._count(p, new) for p, new in zip(group, counts, strict=True)]

    def _commit_each(self, group: list[Prepared]) -> list[tuple[str, Ack] | None]:
        """The group's transaction failed: commit each batch alone, so one bad batch never
        takes the others down with it. A batch the store refuses for its data (PEP 249's
        DataError, IntegrityError, InterfaceError, or a value the driver cannot bind) is
        rejected whole (final: sending it again would fail again); any other failure is the
        database's, and the batch is not answered (the agent sends it again)."""
        answers: list[tuple[str, Ack] | None] = []
        for prepared in group:
            try:
                answers.append(self._commit_many([prepared])[0])
                continue
            except Exception as err:  # StoreError, or a driver error no one foresaw
                if not _refused_for_its_data(err):
                    log.error("%s: batch not stored: %s", prepared.topic, err, exc_info=True)
                    answers.append(None)
                    continue
                refused = self._refused(prepared, err)
            try:
                answers.append(self._commit_many([refused])[0])
            except Exception as err:
                log.error("%s: batch not stored, nor its reject: %s", prepared.topic, err,
                          exc_info=True)
                answers.append(None)
        return answers

    @staticmethod
    def _refused(prepared: Prepared, err: Exception) -> Prepared:
        """``prepared`` as a batch rejected whole because the store refused it: its records in
        one reject row, final rejects in the ack, hash-only chain entries (the chain stays
        whole)."""
        reason = f"the store refused the batch: {type(err).__name__}: {err}"[:300]
        log.error("%s: %s", prepared.topic, reason)
        seqs = [seq for row in prepared.rows
                if type(seq := row[2]) is int and 1 <= seq <= MAX_SAFE_INT]
        body = ("[" + ",".join(str(row[9]) for row in prepared.rows) + "]").encode()
        out = Prepared(prepared.topic, prepared.vehicle, prepared.received_ms,
                       agent=prepared.agent, hashes=prepared.hashes)
        first, last = (min(seqs), max(seqs)) if seqs else (None, None)
        out.rejects = [*prepared.rejects, Reject(prepared.received_ms, prepared.topic,
                                                 prepared.vehicle, prepared.agent, first, last,
                                                 reason, body)]
        if prepared.chain is not None:
            chain = prepared.chain
            out.chain = ChainPart(chain.vehicle, chain.agent, chain.received_ms,
                                  [(seq, h, prev, "rejected") for seq, h, prev, _ in chain.links],
                                  chain.checkpoint)
        if prepared.ack is not None:
            ack = prepared.ack
            ranges = seq_ranges(seqs)
            out.ack = Ack(agent=ack.agent, rejected=[*ack.rejected,
                                                     *((a, b, reason) for a, b in ranges)],
                          retryable=[*ack.retryable, *[False] * len(ranges)],
                          vehicle=ack.vehicle)
            out.ack.hashes = {b: h for _, b, _ in out.ack.rejected
                              if (h := prepared.hashes.get(b)) is not None}
        return out

    def _count(self, prepared: Prepared, new: int) -> tuple[str, Ack] | None:
        vehicle = prepared.vehicle
        live = self._live(vehicle)
        with self.state.lock:
            self.state.rejects_total += len(prepared.rejects)
            if vehicle is not None and live is None:
                self.state.unknown_vehicle_messages += 1
            if live is not None:
                live.rejected += len(prepared.rejects)
                live.last_received_ms = prepared.received_ms
                if not prepared.whole_payload_rejected:
                    live.agent = prepared.agent
                    live.batches += 1
                    live.stored += new
                    live.duplicates += len(prepared.rows) - new
                last = prepared.last_ts_ms
                if last is not None and (live.last_ts_ms is None or last > live.last_ts_ms):
                    live.last_ts_ms = last
        if prepared.rejects:  # one line per batch, however many of its records were bad
            first = prepared.rejects[0]
            what = (
                f"payload of {len(first.payload)} bytes"
                if prepared.whole_payload_rejected
                else f"{len(prepared.rejects)} record(s), first seq {first.first_seq}"
            )
            log.warning("%s: rejected %s: %s", prepared.topic, what, first.reason)
        for note in prepared.notes:
            log.warning("%s: %s", prepared.topic, note)
        if vehicle is None or prepared.ack is None:
            return None
        ack = prepared.ack
        conflicts = prepared.chain.conflicts if prepared.chain is not None else []
        if conflicts:  # firmware-notes/mqtt.md: the agent keeps its version apart
            log.warning("%s: %d record(s) conflict with stored ones (seq %s): both kept",
                        prepared.topic, len(conflicts), conflicts[:10])
            clash = set(conflicts)
            stored = [seq for a, b in ack.stored for seq in range(a, b + 1) if seq not in clash]
            ack.stored = seq_ranges(stored)
            ack.conflicts = sorted(clash)
            ack.hashes = {
                seq: prepared.hashes[seq]
                for seq in [*(b for _, b in ack.stored), *ack.conflicts,
                            *(b for _, b, _ in ack.rejected)]
                if seq in prepared.hashes
            }
        if self.signer is not None:
            self.signer.sign(ack)
        return vehicle, ack

    def _live(self, vehicle: str | None) -> VehicleLive | None:
        """The live entry of ``vehicle``, made if the registry knows it; None for a vehicle
        neither the registry nor the store knows."""
        if vehicle is None:
            return None
        with self.state.lock:
            live = self.state.vehicles.get(vehicle)
        if live is not None:
            return live
        if vehicle not in self.known_vehicles():
            return None
        with self.state.lock:
            return self.state.vehicle(vehicle)

    def handle_status(self, topic: str, payload: bytes) -> None:
        """Record an agent's retained ``online``/``offline`` status."""
        vehicle = vehicle_of_topic(topic)
        if vehicle is None or not payload:
            return
        try:
            obj = json.loads(payload)
            status = obj["status"]
        except (ValueError, TypeError, KeyError, RecursionError):
            status = None
        if not isinstance(status, str):
            log.warning("%s: unreadable status payload dropped", topic)
            with self.state.lock:
                self.state.unreadable_status += 1
            return
        live = self._live(vehicle)
        with self.state.lock:
            if live is None:
                self.state.unknown_vehicle_messages += 1
                return
            live.status = status[:32]
            live.status_ms = now_ms()
            if isinstance(obj.get("agent"), str):
                live.agent = obj["agent"][:128]

    # -- MQTT --------------------------------------------------------------------------------
    def connect(self, broker: BrokerConfig) -> None:
        """Connect in the background (paho's thread reconnects with backoff on its own);
        MqttError when the client cannot be set up (TLS files)."""
        client = make_client(
            mqtt_settings(broker),
            on_connected=self._on_connect,
            on_connect_error=self._on_connect_error,
            on_lost=self._on_lost,
            on_received=self._on_message,
        )
        client.on_subscribe = self._on_subscribed  # paho's own callback: SUBACK
        self.client = client
        self._broker_url = mask_url(broker.url)
        self._client_id = broker.client_id
        self._up_subscription = up_subscription(broker.share_group)
        self.start_readers()
        self._worker = threading.Thread(target=self._work, name="collector-ingest", daemon=True)
        self._worker.start()
        client.start()

    def start_readers(self) -> None:
        """Start the reader processes (``readers``) now, if not yet: :meth:`connect` does."""
        if self.readers > 0 and self._readers is None:
            self._readers = BatchReaders(self.readers, self._read_fn, self.read_limit_s)
            self._readers.warm_up()

    def close(self) -> None:
        """Finish the queued batches, disconnect, stop paho's thread and the worker, and the
        reader processes (started without a connection too, :meth:`start_readers`)."""
        if self.client is None:
            self._close_readers()
            return
        self._closing = True
        # Batches still queued are committed and answered first; one arriving after the
        # sentinel is not PUBACKed, so the broker delivers it again next time.
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join()
        # paho's thread may be waiting to queue a message behind the full queue that nobody
        # reads any more: it must not wait forever (client.stop joins it). What is still queued
        # was never PUBACKed: the broker delivers it again next time.
        self._worker_done = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self.client.stop()
        self.client = None
        self._close_readers()

    def _close_readers(self) -> None:
        if self._readers is not None:
            self._readers.close()
            self._readers = None

    def _on_connect(self, session_present: bool) -> None:
        client = self.client
        assert client is not None
        # Subscribe every time: a broker that restarted without persistence forgot the session.
        # Statuses are not shared: every collector of a group shows every agent's in /health.
        with self.state.lock:
            self.state.subscribed = False
        _, self._subscribe_mid = client.subscribe(
            [(self._up_subscription, 1), (STATUS_SUBSCRIPTION, 1)])
        with self.state.lock:
            self.state.connected = True
            self.state.connected_ms = now_ms()
            self.state.disconnected_reason = None
        log.info("connected to the broker %s (session present: %s), reading %s",
                 self._broker_url, session_present, self._up_subscription)

    def _on_subscribed(self, _client: object, _userdata: object, mid: int, *_rest: object
                       ) -> None:
        # paho's thread: the SUBACK of the connection's subscriptions
        if mid == self._subscribe_mid:
            with self.state.lock:
                self.state.subscribed = True

    def _on_connect_error(self, reason: str, retry_in_s: float) -> None:
        with self.state.lock:
            self.state.connected = False
            self.state.disconnected_reason = reason
        log.warning("cannot connect to broker %s: %s (retrying in %.0f s)",
                    self._broker_url, reason, retry_in_s)

    def _on_lost(self, reason: str) -> None:
        with self.state.lock:
            self.state.connected = False
            self.state.subscribed = False
            self.state.disconnected_reason = reason
        log.log(logging.INFO if self._closing else logging.WARNING,
                "disconnected from broker %s: %s", self._broker_url, reason)

    def _on_message(self, msg: mqtt.MQTTMessage) -> None:
        # paho's thread reads and checks the batch (or hands it to a reader process,
        # collector/readers.py); the worker commits, answers and PUBACKs in order, so reading
        # the next batch overlaps with the database work of this one.
        work: Prepared | Reading | bytes | None = None
        try:
            readers = self._readers
            if msg.topic.endswith("/status"):
                work = bytes(msg.payload)
            elif readers is not None:
                work = readers.submit(msg.topic, bytes(msg.payload),
                                      Known.of(msg.topic, self.known_vehicles()), now_ms(),
                                      self.max_payload_bytes)
            else:
                work = self._prepare(msg.topic, bytes(msg.payload))
        except Exception:  # a bug must not stop the ingest of every other vehicle
            log.exception("%s: unexpected error; the batch is not acknowledged", msg.topic)
        if self._worker_done:  # closing: not PUBACKed, delivered again next time
            return
        self._queue.put((msg.topic, work, msg.mid, msg.qos))

    def _work(self) -> None:
        stopping = False
        while not stopping:
            items = [self._read(self._queue.get())]
            records = _records_of(items[0])
            while len(items) < GROUP and records < GROUP_RECORDS and not self._queue.empty():
                items.append(self._read(self._queue.get_nowait()))
                records += _records_of(items[-1])
            if None in items:  # close(): what came after the sentinel is not PUBACKed
                stopping = True
                items = items[: items.index(None)]
            try:
                self._answer([item for item in items if item is not None])
            except Exception:  # the worker must outlive any bug, or ingest stops for everyone
                log.exception("unexpected error while answering %d message(s)", len(items))

    def _read(self, item: Queued | None) -> Answerable | None:
        """``item`` with its batch read: a reader's result waited for (in arrival order)."""
        if item is None:
            return None
        topic, work, mid, qos = item
        if not isinstance(work, Reading):
            return (topic, work, mid, qos)
        readers = self._readers  # closed only after the worker stopped
        try:
            prepared = work.future.result() if readers is None else readers.result(work)
        except Exception:  # a bug must not stop the ingest of every other vehicle
            log.exception("%s: unexpected error; the batch is not acknowledged", topic)
            return (topic, None, mid, qos)
        return (topic, prepared, mid, qos)

    def _answer(self, items: list[Answerable]) -> None:
        """Commit the batches among ``items`` together, then answer and PUBACK each in order."""
        with self._answering:
            self._answer_now([(topic, self._known_now(work) if isinstance(work, Prepared)
                               else work, mid, qos) for topic, work, mid, qos in items])

    def _known_now(self, prepared: Prepared) -> Prepared:
        """``prepared``, read again if it was refused whole for an unknown vehicle that the
        registry has gained since it was read (the vehicle's agents may have been told to send
        their retryable rejects again already: this batch must not be one of them)."""
        vehicle = prepared.vehicle
        if (vehicle is None or not prepared.whole_payload_rejected or len(prepared.rejects) != 1
                or not prepared.rejects[0].reason.startswith(UNKNOWN_VEHICLE)
                or vehicle not in self.known_vehicles()):
            return prepared
        topic, payload, at = prepared.topic, prepared.rejects[0].payload, prepared.received_ms
        log.info("%s: the registry now has %s: its batch read again", topic, vehicle)
        readers = self._readers
        try:
            if readers is None:
                return prepare(topic, payload, self.known_vehicles, at, self.max_payload_bytes)
            return readers.result(readers.submit(topic, payload,
                                                 Known.of(topic, self.known_vehicles()), at,
                                                 self.max_payload_bytes))
        except Exception:  # a bug: the refusal stands (the agent is told, and told to replay)
            log.exception("%s: the batch could not be read again", topic)
            return prepared

    def _answer_now(self, items: list[Answerable]) -> None:
        client = self.client
        batches = [work for _, work, _, _ in items if isinstance(work, Prepared)]
        answers: list[tuple[str, Ack] | None] | None = None
        if batches:
            try:
                answers = self._commit_many(batches)
            except Exception as err:  # StoreError, or a bug: never the whole group for one batch
                log.warning("%d batch(es) not stored together (%s): storing each alone",
                            len(batches), err, exc_info=True)
                answers = self._commit_each(batches)
        pending = iter(answers or [])
        for topic, work, mid, qos in items:
            if isinstance(work, bytes):
                self.handle_status(topic, work)
            elif isinstance(work, Prepared) and answers is not None:
                answer = next(pending)
                if answer is not None and client is not None:
                    self._publish_ack(client, *answer)
            if client is not None:
                client.ack(mid, qos)

    def announce(self, vehicles: frozenset[str]) -> int:
        """Tell the agents of ``vehicles`` (just added to the registry) that their retryable
        rejects may now be accepted: a signed ack with no entries and ``replay`` set, to every
        agent the store holds rejects of, on the vehicle's ack topic. How many were sent."""
        client = self.client
        if client is None or not vehicles:
            return 0
        with self._answering:  # after the group being answered, if any (_known_now)
            return self._announce(client, vehicles)

    def _announce(self, client: MqttClient, vehicles: frozenset[str]) -> int:
        sent = 0
        for vehicle in sorted(vehicles):
            agents = self.store._read("SELECT DISTINCT agent FROM rejects WHERE vehicle = ? "
                                      "AND agent IS NOT NULL", (vehicle,))
            for (agent,) in agents:
                ack = Ack(agent=str(agent), vehicle=vehicle, replay=True)
                if self.signer is not None:
                    self.signer.sign(ack)
                self._publish_ack(client, vehicle, ack)
                sent += 1
        if sent:
            log.info("registry: %d agent(s) of %s told to send their retryable rejects again",
                     sent, ", ".join(sorted(vehicles)))
        return sent

    def publish_evaluated(self, rows: list[tuple[Any, Any, Any]], as_of_ms: int) -> None:
        """Announce the records (vehicle, agent, seq) a live evaluation judged
        (protocols/evaluated.py): one notice on ``frota/v1/evaluated``. Best effort: a notice
        that cannot be sent is logged, never retried (the findings are stored already)."""
        client = self.client
        if client is None or not rows:
            return
        notice = notice_of(rows, self._client_id, ms_to_ts(as_of_ms))
        try:
            client.send(EVALUATED_TOPIC, encode_evaluated(notice), qos=1)
        except MqttError as err:
            log.info("evaluation notice not sent: %s", err)

    def _publish_ack(self, client: MqttClient, vehicle: str, ack: Ack) -> None:
        """Publish one acknowledgement; a refused one is logged (the agent sends the batch again
        after its ack timeout and is answered then: the records are stored once)."""
        try:
            client.send(ack_topic(vehicle), encode_ack(ack), qos=1)
        except MqttError as err:
            log.warning("%s: acknowledgement not sent, the agent will send again: %s", vehicle, err)
            return
        with self.state.lock:
            self.state.vehicle(vehicle).acks += 1

    # -- health ------------------------------------------------------------------------------
    def health(self, stale_after_s: float, at_ms: int | None = None) -> dict[str, Any]:
        """The state for ``GET /health``: broker, rejects, lag per vehicle."""
        at = now_ms() if at_ms is None else at_ms
        with self.state.lock:
            vehicles = {name: asdict(live) for name, live in sorted(self.state.vehicles.items())}
            out: dict[str, Any] = {
                "broker": {
                    "connected": self.state.connected,
                    "since": _ts(self.state.connected_ms) if self.state.connected else None,
                    "reason": self.state.disconnected_reason,
                },
                "rejects": self.state.rejects_total,
                "unknown_vehicle_messages": self.state.unknown_vehicle_messages,
                "unreadable_status_payloads": self.state.unreadable_status,
            }
        tally = self.store.rejects_tally
        out["rejects_payloads_dropped"] = tally.dropped
        out["rejects_payload_bytes_dropped"] = tally.dropped_bytes
        out["vehicles"] = {
            name: _vehicle_health(live, at, stale_after_s) for name, live in vehicles.items()
        }
        return out


#: A message in the worker's queue: (topic, its batch read — or being read by a reader process
#: —, or a status payload, or None when it could not be read; its MQTT message id, its QoS).
Queued = tuple[str, Prepared | Reading | bytes | None, int, int]
#: The same once its batch is read.
Answerable = tuple[str, Prepared | bytes | None, int, int]


def _records_of(item: Answerable | None) -> int:
    """The record rows a queued item brings to a group commit."""
    return len(item[1].rows) if item is not None and isinstance(item[1], Prepared) else 0


def _refused_for_its_data(err: BaseException) -> bool:
    """True when the store refused what it was given, not failed itself (by PEP 249's names,
    the same for sqlite3 and psycopg)."""
    cause = err.__cause__ if isinstance(err, StoreError) and err.__cause__ is not None else err
    if isinstance(cause, OverflowError | TypeError | ValueError):
        return True
    names = {cls.__name__ for cls in type(cause).__mro__}
    return bool(names & {"DataError", "IntegrityError", "InterfaceError"})


def _ts(ms: int | None) -> str | None:
    return None if ms is None else ms_to_ts(ms)


def _vehicle_health(live: dict[str, Any], at: int, stale_after_s: float) -> dict[str, Any]:
    last_ts, last_rx = live["last_ts_ms"], live["last_received_ms"]
    status = live["status"]
    if status == "online" and (last_rx is None or at - last_rx > stale_after_s * 1000):
        since = live["status_ms"] if last_rx is None else max(last_rx, live["status_ms"] or 0)
        if at - since > stale_after_s * 1000:
            status = "stale"
    return {
        "agent": live["agent"],
        "status": status or "unknown",
        "latest_record_ts": _ts(last_ts),
        "lag_s": None if last_ts is None else round((at - last_ts) / 1000, 3),
        "last_received": _ts(last_rx),
        "since_received_s": None if last_rx is None else round((at - last_rx) / 1000, 3),
        "batches": live["batches"],
        "stored": live["stored"],
        "duplicates": live["duplicates"],
        "rejected": live["rejected"],
        "acks": live["acks"],
    }
