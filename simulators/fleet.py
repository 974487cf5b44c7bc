"""``frota sim fleet``: N agents on the wire, for load and end-to-end latency (docs/deployment.md).

Each simulated bus is what a real agent is to the broker and the collector: its own MQTT
connection (client id, and with ``--provisioned`` its own username, password and signing key),
records chained by ``prev`` (protocols/chain.py) in batches encoded by
:func:`protocols.uplink.encode_batch` with a signed checkpoint, the collector's acknowledgements
read from its ``ack`` topic, and every batch not answered within ``--ack-timeout`` sent again
(the agent's protocol, firmware-notes/mqtt.md). A record is done when an acknowledgement says it
was stored (the collector acknowledges only after its commit) or rejected for good; its latency
is from its creation to that acknowledgement's arrival.

The connections are driven by one thread through a selector (paho's external loop): thousands
of paho threads would measure the simulator, not the collector.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
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
from protocols.identity import load_signing_key
from protocols.mqtt_client import MqttClient, MqttSettings, TlsFiles
from protocols.records import Record, ms_to_ts, now_ms
from protocols.uplink import (
    PayloadError,
    ack_topic,
    check_broker_url,
    decode_ack,
    encode_batch,
    up_topic,
)
from simulators.errors import SimulatorError

log = logging.getLogger(__name__)

#: Seconds between reconnect attempts of a simulated agent that lost its connection.
RECONNECT_S: Final = 2.0
#: Seconds between paho's housekeeping (keepalive pings, retries) for every connection.
MISC_S: Final = 1.0


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
    #: seq → monotonic time it was last sent (absent: not in flight).
    sent: dict[int, float] = field(default_factory=dict)
    connected: bool = False
    subscribed: bool = False
    retry_at: float = 0.0
    #: The socket registered with the selector (paho may close it on its own).
    sock: Any = None


@dataclass
class FleetReport:
    """What a run measured; ``lost`` counts records created and never answered."""

    vehicles: int
    duration_s: float
    created: int = 0
    stored: int = 0
    rejected: int = 0
    conflicts: int = 0
    batches: int = 0
    resent_batches: int = 0
    unanswered: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def percentile(self, p: float) -> float | None:
        """The ``p`` percentile (nearest rank) of the latencies, or None without any."""
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        rank = max(1, -(-len(ordered) * p // 100))  # ceil(n * p / 100), at least 1
        return ordered[int(rank) - 1]

    def summary(self) -> dict[str, Any]:
        """The report as a JSON object (latencies in milliseconds)."""
        return {
            "vehicles": self.vehicles, "duration_s": self.duration_s, "created": self.created,
            "stored": self.stored, "rejected": self.rejected, "conflicts": self.conflicts,
            "unanswered": self.unanswered, "batches": self.batches,
            "resent_batches": self.resent_batches,
            "latency_ms": {name: self.percentile(p) for name, p in
                           (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
        }


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
        self.report = FleetReport(settings.vehicles, settings.duration_s)
        self.selector = selectors.DefaultSelector()
        self.agents = [self._agent(vehicle) for vehicle in self._vehicles()]
        self._by_client = {id(sim.client): sim for sim in self.agents}

    def _vehicles(self) -> list[str]:
        folder = self.settings.provisioned
        if folder is None:
            return vehicle_ids(self.settings.vehicles, self.settings.prefix)
        found = sorted(p.name for p in (folder / "vehicles").glob("*")
                       if (p / "signing.key").is_file() and (p / "password").is_file())
        if len(found) < self.settings.vehicles:
            raise SimulatorError(f"{folder}/vehicles holds {len(found)} provisioned vehicle(s), "
                                 f"fewer than --vehicles {self.settings.vehicles}")
        return found[: self.settings.vehicles]

    def _agent(self, vehicle: str) -> SimAgent:
        folder = self.settings.provisioned
        username = password = None
        key = None
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
            sim.sock = sock

    def _drop(self, sim: SimAgent, now: float) -> None:
        if sim.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(sim.sock)
            sim.sock = None
        sim.connected = sim.subscribed = False
        sim.sent.clear()  # whatever was in flight is sent again after the reconnect
        sim.retry_at = now + RECONNECT_S
        sim.client.disconnect()

    def _on_connected(self, sim: SimAgent) -> None:
        sim.connected = True
        sim.client.subscribe(ack_topic(sim.vehicle), qos=1)
        sim.subscribed = True

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
                sim.sent.pop(seq, None)
                if done is not None:
                    report.stored += 1
                    report.latencies_ms.append((now - done[0]) * 1000)
        flags = [*ack.retryable, *[False] * (len(ack.rejected) - len(ack.retryable))]
        for (first, last, reason), retry in zip(ack.rejected, flags, strict=False):
            if retry:
                continue  # sent again after the ack timeout, as the agent does
            for seq in range(first, last + 1):
                if sim.pending.pop(seq, None) is not None:
                    report.rejected += 1
                    log.warning("%s: seq %d rejected: %s", sim.vehicle, seq, reason)
                sim.sent.pop(seq, None)
        for seq in ack.conflicts:
            if sim.pending.pop(seq, None) is not None:
                report.conflicts += 1
            sim.sent.pop(seq, None)

    # -- the agents' work ---------------------------------------------------------------
    def _publish(self, sim: SimAgent, seqs: list[int], now: float) -> None:
        records = [sim.pending[seq][1] for seq in seqs]
        checkpoint = None
        if sim.key is not None:
            last = records[-1]
            cp = sign_checkpoint(sim.key, sim.vehicle, sim.agent, last["seq"], record_hash(last))
            checkpoint = cp.json()
        payload = encode_batch(sim.vehicle, sim.agent, records, checkpoint=checkpoint)
        info = sim.client.publish(up_topic(sim.vehicle), payload, qos=1)
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            log.warning("%s: publish refused: %s", sim.vehicle, mqtt.error_string(info.rc))
            return
        for seq in seqs:
            sim.sent[seq] = now
        self.report.batches += 1

    def _step(self, sim: SimAgent, now: float, creating: bool) -> None:
        period = 1.0 / self.settings.rate_hz
        while creating and sim.next_record <= now:
            rec = _record(sim)
            sim.pending[rec["seq"]] = (sim.next_record if sim.next_record else now, rec)
            sim.next_record = (sim.next_record or now) + period
            self.report.created += 1
        if not (sim.connected and sim.subscribed) or now < sim.next_batch:
            return
        sim.next_batch = now + self.settings.batch_interval_s
        timeout = self.settings.ack_timeout_s
        late = [s for s, at in sim.sent.items() if now - at >= timeout]
        if late:
            self.report.resent_batches += 1
        fresh = [s for s in sim.pending if s not in sim.sent]
        todo = sorted({*late, *fresh})
        for chunk in _chunks(todo, 1000):
            self._publish(sim, chunk, now)

    def _pump(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            sim: SimAgent = key.data
            if sim.client.loop_read() != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self._drop(sim, time.monotonic())
        for sim in self.agents:
            if (sim.client.want_write() and sim.client.socket() is not None
                    and sim.client.loop_write() != MQTTErrorCode.MQTT_ERR_SUCCESS):
                self._drop(sim, time.monotonic())

    def run(self) -> FleetReport:
        """Connect every agent, create records for ``duration_s``, wait up to ``drain_s`` for
        their acknowledgements, disconnect; the report."""
        start = time.monotonic()
        stagger = 1.0 / self.settings.rate_hz / max(len(self.agents), 1)
        for i, sim in enumerate(self.agents):
            self._connect(sim, start)
            sim.next_record = start + i * stagger  # spread the agents over one period
            sim.next_batch = start + i * self.settings.batch_interval_s / len(self.agents)
            if i % 50 == 49:
                self._pump(0)
        end = start + self.settings.duration_s
        drain_end = end + self.settings.drain_s
        next_misc = start
        while True:
            now = time.monotonic()
            creating = now < end
            if not creating and (now >= drain_end or not any(s.pending for s in self.agents)):
                break
            for sim in self.agents:
                if sim.sock is None and now >= sim.retry_at:
                    self._connect(sim, now)
                self._step(sim, now, creating)
            if now >= next_misc:
                next_misc = now + MISC_S
                for sim in self.agents:
                    if sim.client.socket() is not None:
                        sim.client.loop_misc()
            self._pump(0.005)
        self.report.unanswered = sum(len(s.pending) for s in self.agents)
        for sim in self.agents:
            sim.client.disconnect()
        self._pump(0)
        return self.report


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


# -- the command line ------------------------------------------------------------------------
def register_sim(subparsers: Any) -> None:
    """Add ``frota sim fleet``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fleet", help="N simulated agents on the wire: load and end-to-end latency",
        description="Behave like N agents on the wire: each bus its own MQTT connection, "
        "chained records in batches with signed checkpoints (with --provisioned), the "
        "collector's acknowledgements awaited and unanswered batches sent again. Prints the "
        "latency from a record's creation to the acknowledgement that it was stored "
        "(percentiles) and what was never answered.",
    )
    parser.add_argument("--vehicles", type=int, default=10, metavar="N",
                        help="simulated buses (default 10)")
    parser.add_argument("--rate", type=float, default=1.0, metavar="HZ",
                        help="records per second per bus (default 1)")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S",
                        help="seconds of records (default 60)")
    parser.add_argument("--broker", default="mqtt://127.0.0.1:1883", metavar="URL",
                        help="mqtt:// or mqtts:// broker (default mqtt://127.0.0.1:1883)")
    parser.add_argument("--batch-interval", type=float, default=1.0, metavar="S",
                        help="seconds between a bus's batches (the agent's default: 1)")
    parser.add_argument("--ack-timeout", type=float, default=30.0, metavar="S",
                        help="send a batch again after S seconds without an answer (default 30)")
    parser.add_argument("--drain", type=float, default=60.0, metavar="S",
                        help="after --duration, wait up to S seconds for answers (default 60)")
    parser.add_argument("--prefix", default="SIM", help="vehicle id prefix (default SIM)")
    parser.add_argument("--provisioned", type=Path, metavar="DIR",
                        help="a 'frota provision' folder: its first N vehicles, with their "
                        "broker credentials and signing keys")
    parser.add_argument("--write-registry", type=Path, metavar="FILE",
                        help="write a fleet registry naming the N simulated buses to FILE "
                        "(for the collector's 'registry') and exit")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run_fleet)


def settings_of(args: argparse.Namespace) -> FleetSettings:
    """The options, checked; SimulatorError names a bad one."""
    if not 1 <= args.vehicles <= 100_000:
        raise SimulatorError("--vehicles must be between 1 and 100000")
    for name in ("rate", "duration", "batch_interval", "ack_timeout", "drain"):
        value = getattr(args, name)
        if not value > 0 or value != value or value == float("inf"):
            raise SimulatorError(f"--{name.replace('_', '-')} must be a positive number")
    try:
        check_broker_url(args.broker)
    except ValueError as err:
        raise SimulatorError(f"--broker: {err}") from err
    if args.provisioned is not None and not (args.provisioned / "vehicles").is_dir():
        raise SimulatorError(f"--provisioned: {args.provisioned} is not a provisioned fleet folder")
    return FleetSettings(args.broker, args.vehicles, args.rate, args.duration,
                         args.batch_interval, args.ack_timeout, args.drain, args.prefix,
                         args.provisioned)


def run_fleet(args: argparse.Namespace) -> int:
    """``frota sim fleet``: run, print the report; 0 when nothing was left unanswered."""
    if args.write_registry is not None:
        args.write_registry.write_text(json.dumps(registry(args.vehicles, args.prefix), indent=1),
                                       encoding="utf-8")
        return 0
    report = Fleet(settings_of(args)).run()
    out = report.summary()
    if args.json:
        print(json.dumps(out), flush=True)
    else:
        lat = out["latency_ms"]
        print(f"{report.vehicles} vehicles, {report.duration_s:g} s: {report.created} records "
              f"created, {report.stored} stored, {report.rejected} rejected, "
              f"{report.conflicts} conflicts, {report.unanswered} unanswered; "
              f"{report.batches} batches ({report.resent_batches} resent)")
        if lat["p50"] is not None:
            print("latency, creation to stored (ack received), ms: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in lat.items()))
    return 0 if report.unanswered == 0 else 1
