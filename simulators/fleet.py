"""``frota sim fleet``: N agents on the wire, for load and end-to-end latency (docs/deployment.md).

Each simulated bus is what a real agent is to the broker and the collector: its own MQTT
connection (client id, and with ``--provisioned`` its own username, password and signing key),
records chained by ``prev`` (protocols/chain.py) in batches encoded by
:func:`protocols.uplink.encode_batch` with a signed checkpoint per batch (``--provisioned``, or
``--sign`` with a key of its own), the collector's acknowledgements read from its ``ack`` topic,
and every batch not answered in time sent again with capped exponential backoff and jitter
(simulators/fleet_report.py). A record is *stored* when an acknowledgement says so (the collector
acknowledges only after its commit) and *evaluated* when a collector's evaluation notice names it
(protocols/evaluated.py, read by one more connection, the monitor); its latencies run from its
creation to each of those messages' arrival.

The connections of one worker process are driven by one thread through a selector (paho's
external loop): thousands of paho threads would measure the simulator, not the collector. Each
bus is visited only when its next record or batch is due (a heap), and a connection is watched
for writing only while paho has something to write. ``--workers K`` splits the fleet over K
processes (simulators/fleet_cli.py).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import random
import selectors
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import paho.mqtt.client as mqtt
from cryptography.hazmat.primitives.asymmetric import ed25519
from paho.mqtt.enums import MQTTErrorCode

from protocols.chain import GENESIS, record_hash, sign_checkpoint
from protocols.evaluated import EVALUATED_TOPIC, decode_evaluated
from protocols.identity import load_signing_key
from protocols.mqtt_client import MqttClient, MqttSettings, TlsFiles
from protocols.records import Record, ms_to_ts, now_ms, ts_to_ms
from protocols.uplink import PayloadError, ack_topic, decode_ack, encode_batch, up_topic
from simulators.errors import SimulatorError
from simulators.fleet_report import FleetReport, resend_after

__all__ = ["Fleet", "FleetReport", "FleetSettings", "registry", "vehicle_ids"]

log = logging.getLogger(__name__)

#: Seconds between reconnect attempts of a simulated agent that lost its connection.
RECONNECT_S: Final = 2.0
#: Seconds between paho's housekeeping (keepalive pings, retries) for every connection.
MISC_S: Final = 1.0
#: Seconds a bus that waits for its connection is looked at again.
IDLE_S: Final = 0.1
_RW: Final = selectors.EVENT_READ | selectors.EVENT_WRITE


@dataclass
class SimAgent:
    """One simulated bus: its identity, its chain and what it still waits to hear about."""

    vehicle: str
    agent: str
    client: MqttClient
    key: ed25519.Ed25519PrivateKey | None = None
    seq: int = 0
    prev: str = GENESIS
    next_record: float = 0.0
    next_batch: float = 0.0
    #: seq → (created, monotonic seconds; the record) for records not yet answered.
    pending: dict[int, tuple[float, Record]] = field(default_factory=dict)
    #: seq → monotonic time by which an answer is due (absent: not in flight).
    due: dict[int, float] = field(default_factory=dict)
    #: seq → how many times it was sent.
    tries: dict[int, int] = field(default_factory=dict)
    #: seq → created (monotonic) of records not yet named by an evaluation notice.
    unjudged: dict[int, float] = field(default_factory=dict)
    #: seq → (when its batch was due, when it was first sent; monotonic) of records not yet
    #: named by an evaluation notice: where their latency went (FleetReport.phases_ms).
    sent: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: seq → when its acknowledgement arrived (monotonic), until its evaluation notice.
    acked: dict[int, float] = field(default_factory=dict)
    connected: bool = False
    subscribed: bool = False
    retry_at: float = 0.0
    #: The socket registered with the selector (paho may close it on its own).
    sock: Any = None
    #: True while the selector also watches the socket for writing.
    writing: bool = False


@dataclass(frozen=True)
class FleetSettings:
    """How the simulated fleet behaves (the command line's options)."""

    broker: str
    vehicles: int
    rate_hz: float
    duration_s: float
    batch_interval_s: float = 1.0
    ack_timeout_s: float = 30.0
    drain_s: float = 60.0
    prefix: str = "SIM"
    provisioned: Path | None = None
    #: Sign a checkpoint per batch with a key made for the run (as an agent with an identity
    #: does) when not ``provisioned`` (provisioned buses always sign with their own key).
    sign: bool = False
    #: Wait for (and measure) the collectors' evaluation notices, not only the acks.
    evaluated: bool = True
    #: This worker's share: (index, count) of ``--workers``.
    share: tuple[int, int] = (0, 1)


def vehicle_ids(count: int, prefix: str = "SIM") -> list[str]:
    """The simulated buses' ids: ``SIM00001``, ``SIM00002``..."""
    return [f"{prefix}{i:05d}" for i in range(1, count + 1)]


def registry(count: int, prefix: str = "SIM") -> dict[str, Any]:
    """A fleet registry (docs/records.md) naming the simulated buses, for the collector."""
    return {"lines": [], "drivers": [],
            "vehicles": [{"id": v, "seats": 46, "capacity": 46} for v in vehicle_ids(count, prefix)]}


def _record(sim: SimAgent) -> Record:
    """The next record of ``sim``: speed and position in turn, at the simulator's clock (the
    records' device time), chained to the one before."""
    sim.seq += 1
    seq = sim.seq
    rec: Record = {"vehicle": sim.vehicle, "ts": ms_to_ts(now_ms()), "agent": sim.agent,
                   "seq": seq, "prev": sim.prev}
    if seq % 2:
        rec.update(kind="speed", kmh=float(40 + seq % 50))
    else:
        rec.update(kind="position", lat=-23.5 + (seq % 1000) * 1e-5, lon=-46.6, kmh=60.0)
    sim.prev = record_hash(rec)
    return rec


class Fleet:
    """The simulated agents, their connections and the selector that drives them."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.selector = selectors.DefaultSelector()
        self.rng = random.Random()
        self.agents = [self._agent(vehicle) for vehicle in self._vehicles()]
        self.report = FleetReport(len(self.agents), settings.duration_s)
        self._by_vehicle = {sim.vehicle: sim for sim in self.agents}
        self.monitor: SimAgent | None = None
        #: wall clock minus monotonic clock: a notice's as_of on the monotonic clock
        self._wall_offset = time.time() - time.monotonic()
        if settings.evaluated and settings.provisioned is None:
            client = MqttClient(MqttSettings(url=settings.broker,
                                             client_id=f"sim-monitor-{uuid.uuid4().hex[:12]}",
                                             clean_session=True, max_inflight=100))
            self.monitor = SimAgent("monitor", "", client)
            client.on_received = self._on_notice
            client.on_connected = lambda _present: self._on_monitor_connected()

    def _vehicles(self) -> list[str]:
        folder = self.settings.provisioned
        index, count = self.settings.share
        if folder is None:
            every = vehicle_ids(self.settings.vehicles, self.settings.prefix)
        else:
            found = sorted(p.name for p in (folder / "vehicles").glob("*")
                           if (p / "signing.key").is_file() and (p / "password").is_file())
            if len(found) < self.settings.vehicles:
                raise SimulatorError(f"{folder}/vehicles holds {len(found)} provisioned "
                                     f"vehicle(s), fewer than --vehicles {self.settings.vehicles}")
            every = found[: self.settings.vehicles]
        return every[index::count]

    def _agent(self, vehicle: str) -> SimAgent:
        folder = self.settings.provisioned
        username = password = None
        key = ed25519.Ed25519PrivateKey.generate() if self.settings.sign else None
        ca = None
        if folder is not None:
            home = folder / "vehicles" / vehicle
            username = vehicle
            password = (home / "password").read_text(encoding="utf-8").strip()
            key = load_signing_key(home / "signing.key")
            ca = home / "ca.crt" if (home / "ca.crt").is_file() else None
        agent = f"sim-{uuid.uuid4()}"
        settings = MqttSettings(url=self.settings.broker, client_id=f"{vehicle}-{agent[4:12]}",
                                username=username, password=password, tls=TlsFiles(ca),
                                clean_session=True, max_inflight=100)
        sim = SimAgent(vehicle, agent, MqttClient(settings), key)
        sim.client.on_received = lambda msg, sim=sim: self._on_ack(sim, msg)
        sim.client.on_connected = lambda _present, sim=sim: self._on_connected(sim)
        return sim

    # -- connections ---------------------------------------------------------------------
    def _connect(self, sim: SimAgent, now: float) -> None:
        settings = sim.client.settings
        try:
            sim.client.connect(settings.host, settings.port, keepalive=settings.keepalive_s)
        except (OSError, ValueError) as err:
            sim.retry_at = now + RECONNECT_S
            log.warning("%s: cannot connect: %s", sim.vehicle, err)
            return
        sock = sim.client.socket()
        if sock is not None:
            self.selector.register(sock, selectors.EVENT_READ, sim)
            sim.sock, sim.writing = sock, False
            self._watch(sim)

    def _watch(self, sim: SimAgent) -> None:
        """Watch the socket for writing exactly while paho has something to write."""
        if sim.sock is None:
            return
        want = sim.client.want_write()
        if want != sim.writing:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.modify(sim.sock, _RW if want else selectors.EVENT_READ, sim)
                sim.writing = want

    def _drop(self, sim: SimAgent, now: float) -> None:
        if sim.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(sim.sock)
            sim.sock = None
        sim.connected = sim.subscribed = sim.writing = False
        sim.due.clear()  # whatever was in flight is sent again after the reconnect
        sim.retry_at = now + RECONNECT_S
        sim.client.disconnect()

    def _on_connected(self, sim: SimAgent) -> None:
        sim.connected = True
        sim.client.subscribe(ack_topic(sim.vehicle), qos=1)
        sim.subscribed = True

    def _on_monitor_connected(self) -> None:
        assert self.monitor is not None
        self.monitor.connected = self.monitor.subscribed = True
        self.monitor.client.subscribe(EVALUATED_TOPIC, qos=1)

    def _on_notice(self, msg: mqtt.MQTTMessage) -> None:
        """An evaluation notice: the records it names are stored and evaluated."""
        try:
            notice = decode_evaluated(bytes(msg.payload))
        except PayloadError as err:
            log.warning("unreadable evaluation notice: %s", err)
            return
        now = time.monotonic()
        report = self.report
        report.notices += 1
        try:  # the evaluation's as_of (the collector's clock) on this process's monotonic one
            as_of: float | None = ts_to_ms(notice.as_of) / 1000 - self._wall_offset \
                if notice.as_of is not None else None
        except ValueError:
            as_of = None
        phases = report.phases_ms
        if as_of is not None:
            report.notice_lag_ms.append(
                (ts_to_ms(notice.as_of or ""), round((now - as_of) * 1000, 1)))
        for vehicle, by_agent in notice.ranges.items():
            sim = self._by_vehicle.get(vehicle)
            ranges = by_agent.get(sim.agent) if sim is not None else None
            if sim is None or not ranges:
                continue
            for first, last in ranges:
                for seq in range(first, min(last, sim.seq) + 1):
                    created = sim.unjudged.pop(seq, None)
                    if created is not None:
                        report.evaluated += 1
                        report.evaluated_ms.append((now - created) * 1000)
                        sent = sim.sent.pop(seq, None)
                        acked = sim.acked.pop(seq, None)
                        if sent is not None and acked is not None and as_of is not None:
                            wait = max(sent[0] - created, 0.0)
                            phases.append(((now - created) * 1000, wait * 1000,
                                           (sent[1] - created - wait) * 1000,
                                           (acked - sent[1]) * 1000, (as_of - acked) * 1000,
                                           (now - as_of) * 1000))

    def _on_ack(self, sim: SimAgent, msg: mqtt.MQTTMessage) -> None:
        try:
            ack = decode_ack(bytes(msg.payload))
        except PayloadError as err:
            log.warning("%s: unreadable acknowledgement: %s", sim.vehicle, err)
            return
        if ack.agent != sim.agent:
            return  # an answer to an earlier run of the same bus
        now = time.monotonic()
        report = self.report
        for first, last in ack.stored:
            for seq in range(first, last + 1):
                done = sim.pending.pop(seq, None)
                sim.due.pop(seq, None)
                sim.tries.pop(seq, None)
                if done is not None:
                    report.stored += 1
                    if self.monitor is None:
                        sim.sent.pop(seq, None)
                    elif seq in sim.unjudged:
                        sim.acked[seq] = now
                    report.latencies_ms.append((now - done[0]) * 1000)
        flags = [*ack.retryable, *[False] * (len(ack.rejected) - len(ack.retryable))]
        for (first, last, reason), retry in zip(ack.rejected, flags, strict=False):
            if retry:
                continue  # sent again after the ack timeout, as the agent does
            for seq in range(first, last + 1):
                if sim.pending.pop(seq, None) is not None:
                    report.rejected += 1
                    log.warning("%s: seq %d rejected: %s", sim.vehicle, seq, reason)
                self._forget(sim, seq)
        for seq in ack.conflicts:
            if sim.pending.pop(seq, None) is not None:
                report.conflicts += 1
            self._forget(sim, seq)

    @staticmethod
    def _forget(sim: SimAgent, seq: int) -> None:
        """A record answered for good without being stored: never evaluated either."""
        sim.due.pop(seq, None)
        sim.sent.pop(seq, None)
        sim.acked.pop(seq, None)
        sim.tries.pop(seq, None)
        sim.unjudged.pop(seq, None)

    # -- the agents' work ---------------------------------------------------------------
    def _publish(self, sim: SimAgent, seqs: list[int], now: float, due_at: float) -> None:
        records = [sim.pending[seq][1] for seq in seqs]
        checkpoint = None
        if sim.key is not None:  # per batch, as the agent does (agent/checkpoints.py)
            last = records[-1]
            cp = sign_checkpoint(sim.key, sim.vehicle, sim.agent, last["seq"], record_hash(last))
            checkpoint = cp.json()
        payload = encode_batch(sim.vehicle, sim.agent, records, checkpoint=checkpoint)
        info = sim.client.publish(up_topic(sim.vehicle), payload, qos=1)
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            log.warning("%s: publish refused: %s", sim.vehicle, mqtt.error_string(info.rc))
            return
        timeout = self.settings.ack_timeout_s
        for seq in seqs:
            if seq not in sim.sent:
                sim.sent[seq] = (due_at, now)
            tries = sim.tries[seq] = sim.tries.get(seq, 0) + 1
            sim.due[seq] = now + resend_after(timeout, tries, self.rng)
        self.report.batches += 1

    def _step(self, sim: SimAgent, now: float, creating: bool) -> float:
        """Create the records due, send a batch if one is due; when to look at ``sim`` again."""
        period = 1.0 / self.settings.rate_hz
        while creating and sim.next_record <= now:
            rec = _record(sim)
            created = sim.next_record if sim.next_record else now
            sim.pending[rec["seq"]] = (created, rec)
            sim.unjudged[rec["seq"]] = created
            sim.next_record = (sim.next_record or now) + period
            self.report.created += 1
        if not (sim.connected and sim.subscribed):
            return now + IDLE_S
        if now >= sim.next_batch:
            due_at = sim.next_batch
            sim.next_batch = now + self.settings.batch_interval_s
            late = [s for s, at in sim.due.items() if at <= now]
            if late:
                self.report.resent_batches += 1
            fresh = [s for s in sim.pending if s not in sim.due]
            for chunk in _chunks(sorted({*late, *fresh}), 1000):
                self._publish(sim, chunk, now, due_at)
            self._watch(sim)
        return min(sim.next_batch, sim.next_record) if creating else sim.next_batch

    def _pump(self, timeout: float) -> None:
        for key, events in self.selector.select(timeout):
            sim: SimAgent = key.data
            ok = True
            if events & selectors.EVENT_READ:
                ok = sim.client.loop_read() == MQTTErrorCode.MQTT_ERR_SUCCESS
            if ok and events & selectors.EVENT_WRITE and sim.client.socket() is not None:
                ok = sim.client.loop_write() == MQTTErrorCode.MQTT_ERR_SUCCESS
            if not ok:
                self._drop(sim, time.monotonic())
            else:
                self._watch(sim)

    def _housekeeping(self, now: float) -> None:
        """paho's keepalive and retries for every connection; reconnect the monitor."""
        every = [*self.agents, *([self.monitor] if self.monitor is not None else [])]
        for sim in every:
            if sim.sock is None:
                continue
            if sim.client.loop_misc() != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self._drop(sim, now)
            else:
                self._watch(sim)
        monitor = self.monitor
        if monitor is not None and monitor.sock is None and now >= monitor.retry_at:
            self._connect(monitor, now)

    def _waiting(self) -> bool:
        """True while some record waits for its answer (or, measuring evaluations, for its
        evaluation notice)."""
        if any(s.pending for s in self.agents):
            return True
        return self.monitor is not None and any(s.unjudged for s in self.agents)

    def run(self) -> FleetReport:
        """Connect every agent, create records for ``duration_s``, wait up to ``drain_s`` for
        their acknowledgements (and evaluation notices), disconnect; the report."""
        start = time.monotonic()
        if self.monitor is not None:
            self._connect(self.monitor, start)
        count = max(len(self.agents), 1)
        stagger = 1.0 / self.settings.rate_hz / count
        heap: list[tuple[float, int]] = []
        for i, sim in enumerate(self.agents):
            self._connect(sim, start)
            sim.next_record = start + i * stagger  # spread the agents over one period
            sim.next_batch = start + i * self.settings.batch_interval_s / count
            heap.append((sim.next_record, i))
            if i % 50 == 49:
                self._pump(0)
        heapq.heapify(heap)
        end = start + self.settings.duration_s
        drain_end = end + self.settings.drain_s
        next_misc = start
        next_check = end
        while True:
            now = time.monotonic()
            creating = now < end
            if not creating and now >= next_check:
                next_check = now + 0.2
                if now >= drain_end or not self._waiting():
                    break
            while heap and heap[0][0] <= now:
                _, i = heapq.heappop(heap)
                sim = self.agents[i]
                if sim.sock is None and now >= sim.retry_at:
                    self._connect(sim, now)
                heapq.heappush(heap, (self._step(sim, now, creating), i))
            if now >= next_misc:
                next_misc = now + MISC_S
                self._housekeeping(now)
            wait = min(heap[0][0] if heap else now + 0.05, next_misc, now + 0.05) - now
            self._pump(max(wait, 0.0))
        self.report.unanswered = sum(len(s.pending) for s in self.agents)
        if self.monitor is not None:
            self.report.unevaluated = sum(len(s.unjudged) for s in self.agents)
        for sim in [*self.agents, *([self.monitor] if self.monitor is not None else [])]:
            sim.client.disconnect()
        self._pump(0)
        return self.report


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
