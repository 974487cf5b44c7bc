"""Collector ingest throughput: a backlog of batches drained from a private Mosquitto into the store.

    python -m bench.collector_ingest [--records 100000] [--batch 100] [--repeat 3] [--postgres DSN]

The records are chained as an agent makes them (``prev``, the hash of the record before) and each
batch carries the agent's signed checkpoint (issue 12), so the collector's cases do the whole
ingest with verification on: every record hashed, its chain hash stored in its row, and the live chain
verifier (:class:`collector.verifier.ChainVerifier`, running beside the ingest as in ``frota
collector run``) checking every link and checkpoint; their clock stops when every record is
stored AND verified. The batches are queued in the broker for a persistent session first (``mosquitto_pub -l``, one
JSON payload per line, fewer than 65,535 messages: Mosquitto 2.0.11's ``mosquitto_pub -l`` at QoS 1 loses
messages past 65,535 lines in one run, its message ids wrap), then the
subscriber connects and drains them. Three subscribers drain the same backlog in the same run:

- ``floor``: a bare paho subscriber that json-decodes each batch and stores it as received (no
  re-serialization: the payload in one row, its records' keys in positional tuples by
  ``executemany``) in a plain WAL table, one transaction per message, with the same durability as
  the collector it is compared to (``synchronous=FULL``, and ``NORMAL``);
- ``collector``: the collector's :class:`collector.ingest.Ingest` (decode, validate every record,
  store once with its keys and indexes, commit with ``synchronous=FULL``, publish the ack);
- ``collector-normal``: the same with ``synchronous=NORMAL``;
- ``collector FULL, live rules running``: ``collector`` with the live rules' evaluator running
  beside it as in ``frota collector run`` (:class:`collector.findings.LiveFindings`, here at most
  1 s apart instead of 15 s): how much the evaluations slow the ingest's commits.

Beside each collector case into a store, the live rules' cost per arriving record: one
evaluation (:meth:`LiveFindings.evaluate_now`, what the collector runs after a burst) of the
records just drained, divided by their number.

With ``--postgres DSN`` two more cases per round, each in a fresh schema: the PostgreSQL floor
(the same bare subscriber, the payload in one row and its records' keys by ``COPY``) and the
collector storing into PostgreSQL; the header names the server's durability settings both
PostgreSQL arms commit under (neither changes them).

A last line times :meth:`Ingest.handle` alone on zstd batches (no broker) to show the split.
Each is run ``--repeat`` times (at least 3), interleaved round by round; printed: the median and
the spread of records/s, the ratio to the floor of the same round, and issue 16's target beside.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import psycopg
from cryptography.hazmat.primitives.asymmetric import ed25519
from paho.mqtt.enums import CallbackAPIVersion

from bench.common import Figure, add_repeat, host_line, target, verified_seq
from collector.config import BrokerConfig, IngestConfig
from collector.findings import LiveFindings
from collector.ingest import Ingest
from collector.store import Store, open_store
from collector.verifier import ChainVerifier
from frota.harness import Mosquitto
from frota.harness.postgres import private_schema
from protocols import identity
from protocols.chain import GENESIS, record_hash, sign_checkpoint
from protocols.keyring import entry_json, write_entries
from protocols.records import ms_to_ts, ts_to_ms
from protocols.uplink import UP_SUBSCRIPTION, encode_batch, up_topic

#: The collector's reader processes in its cases: ``ingest.readers``'s default on this machine.
READERS = IngestConfig().reader_processes()
VEHICLE = "ABC1D23"
AGENT = "bench-agent"
T0 = ts_to_ms("2026-03-02T00:00:00.000Z")


@dataclass(frozen=True)
class Trust:
    """A fleet CA, the bus's certified key and the collector's keyring, in a folder."""

    key: ed25519.Ed25519PrivateKey
    ca_file: Path
    keyring: Path


def make_trust(folder: Path) -> Trust:
    """The trust material of one bus (what ``frota provision`` makes, without the broker's)."""
    ca_key, ca_cert = identity.make_ca("bench CA")
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, VEHICLE, "vehicle", key.public_key())
    ca_file, keyring = folder / "ca.crt", folder / "keyring.json"
    ca_file.write_bytes(identity.cert_pem(ca_cert))
    write_entries(keyring, [entry_json(cert)])
    return Trust(key, ca_file, keyring)


def _batches(records: list[dict[str, Any]], size: int,
             key: ed25519.Ed25519PrivateKey) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """The records chained as the agent chains them (``prev``), in batches, each with the
    checkpoint the agent signs at its last record."""
    prev = GENESIS
    hashes: list[str] = []
    for rec in records:
        rec["prev"] = prev
        prev = record_hash(rec)
        hashes.append(prev)
    out = []
    for start in range(0, len(records), size):
        chunk = records[start : start + size]
        last = start + len(chunk)
        cp = sign_checkpoint(key, VEHICLE, AGENT, chunk[-1]["seq"], hashes[last - 1]).json()
        out.append((chunk, cp))
    return out


def _verified(store: Store, verifier: ChainVerifier, total: int) -> None:
    """Finish the verifier's work; every record verified, none failed."""
    seq = verified_seq(store, verifier, VEHICLE, AGENT)
    bad = store._read("SELECT count(*) FROM integrity")[0][0]
    assert seq == total, f"verified up to seq {seq} of {total}"
    assert int(bad) == 0, f"{bad} integrity events on genuine records"


def _records(count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for seq in range(1, count + 1):
        rec: dict[str, Any] = {"vehicle": VEHICLE, "ts": ms_to_ts(T0 + seq * 500), "agent": AGENT,
                               "seq": seq}
        if seq % 2:
            rec.update(kind="speed", kmh=float(seq % 90), odometer_m=seq * 7,
                       device_seq=seq // 2, raw="7e0a" + f"{seq:08x}" + "00" * 14)
        else:
            rec.update(kind="position", lat=-23.5 + seq * 1e-6, lon=-46.6 - seq * 1e-6, kmh=80.0,
                       course=123.4)
        out.append(rec)
    return out


def _queue_backlog(broker: Mosquitto, lines: Path, subscribe: Callable[[], None]) -> None:
    """Register the persistent session, disconnect, then queue every payload for it."""
    subscribe()
    subprocess.run(
        ["mosquitto_pub", "-p", str(broker.port), "-q", "1", "-t", up_topic(VEHICLE), "-l"],
        stdin=lines.open("rb"),
        check=True,
    )


def _wait(done: Callable[[], bool], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("the backlog never drained")
        time.sleep(0.002)


def _floor(broker: Mosquitto, lines: Path, total: int, folder: Path, sync: str) -> float:
    conn = sqlite3.connect(folder / f"floor-{sync}.db", isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync.upper()}")
    # The payload kept as received (no re-serialization), its records' keys beside it.
    conn.execute("CREATE TABLE batches (id INTEGER PRIMARY KEY, payload BLOB)")
    conn.execute("CREATE TABLE records (vehicle, agent, seq, ts, kind, batch)")
    stored = [0]

    def on_message(_c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        payload = bytes(msg.payload)
        batch = json.loads(payload)
        conn.execute("BEGIN")
        cur = conn.execute("INSERT INTO batches (payload) VALUES (?)", (payload,))
        rows = [(r["vehicle"], r["agent"], r["seq"], r["ts"], r["kind"], cur.lastrowid)
                for r in batch["records"]]
        conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        stored[0] += len(rows)

    def client() -> mqtt.Client:
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-floor-{sync}",
                        clean_session=False)
        c.on_connect = lambda cl, *_a: cl.subscribe(UP_SUBSCRIPTION, qos=1)
        c.on_message = on_message
        c.connect("127.0.0.1", broker.port)
        return c

    def subscribe() -> None:
        c = client()
        c.loop_start()
        time.sleep(0.5)
        c.disconnect()
        c.loop_stop()

    _queue_backlog(broker, lines, subscribe)
    c = client()
    start = time.perf_counter()
    c.loop_start()
    _wait(lambda: stored[0] >= total)
    elapsed = time.perf_counter() - start
    c.disconnect()
    c.loop_stop()
    conn.close()
    return total / elapsed


def _collector(broker: Mosquitto, lines: Path, total: int, folder: Path, sync: str,
               trust: Trust, live: bool = False, url: str | None = None) -> tuple[float, float]:
    """records/s of the collector's ingest with verification on (stored and verified), and the
    seconds of one live rules' evaluation of the records drained (0 when ``live``: the
    evaluator ran during the drain)."""
    name = f"{sync}-live" if live else sync
    if url is not None:
        name = "postgresql"
    store = open_store(url or str(folder / f"collector-{name}.db"), synchronous=sync)
    client_id = f"bench-collector-{name}"
    config = BrokerConfig(url=broker.url, client_id=client_id)

    def subscribe() -> None:
        ingest = Ingest(store, lambda: frozenset({VEHICLE}))
        ingest.connect(config)
        _wait(lambda: ingest.state.connected, 10)
        time.sleep(0.5)
        ingest.close()

    _queue_backlog(broker, lines, subscribe)
    # reader processes as frota collector run starts them (ingest.readers), started before the
    # clock as a running collector's are
    ingest = Ingest(store, lambda: frozenset({VEHICLE}), readers=READERS)
    ingest.start_readers()
    vehicle = ingest.state.vehicle(VEHICLE)
    verifier = ChainVerifier(store, trust.ca_file, trust.keyring)  # every 2 s, as the collector
    rules = LiveFindings(store, _registry(folder), max_delay_s=1.0)
    start = time.perf_counter()
    ingest.connect(config)
    verifier.start()
    if live:
        rules.start()
    _wait(lambda: vehicle.stored + vehicle.duplicates >= total)
    verifier.stop()
    _verified(store, verifier, total)
    elapsed = time.perf_counter() - start
    if live:
        rules.stop()
    ingest.close()
    assert store.count(VEHICLE) == total, store.count(VEHICLE)
    evaluation = 0.0
    if not live:
        started = time.perf_counter()
        rules.evaluate_now()
        evaluation = time.perf_counter() - started
    store.close()
    return total / elapsed, evaluation


def _registry(folder: Path) -> Path:
    path = folder / "fleet.json"
    path.write_text(json.dumps({
        "lines": [], "drivers": [],
        "vehicles": [{"id": VEHICLE, "seats": 46, "capacity": 46}],
    }))
    return path


@contextmanager
def _pg_schema(dsn: str) -> Iterator[str]:
    """A fresh schema in PostgreSQL for one run; the DSN that uses it (dropped afterwards)."""
    with private_schema(dsn, "bench") as (url, _):
        yield url


def _floor_pg(broker: Mosquitto, lines: Path, total: int, dsn: str) -> float:
    """The PostgreSQL floor: the payload as received in one row, its records' keys by COPY, one
    transaction per message (PostgreSQL's default durability, synchronous_commit on)."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE TABLE batches (id BIGSERIAL PRIMARY KEY, payload BYTEA)")
    conn.execute("CREATE TABLE records (vehicle TEXT, agent TEXT, seq BIGINT, ts TEXT, kind TEXT, "
                 "batch BIGINT)")
    stored = [0]

    def on_message(_c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        payload = bytes(msg.payload)
        batch = json.loads(payload)
        with conn.transaction():
            row = conn.execute("INSERT INTO batches (payload) VALUES (%s) RETURNING id",
                               (payload,)).fetchone()
            assert row is not None
            with conn.cursor().copy("COPY records FROM STDIN") as copy:
                for r in batch["records"]:
                    copy.write_row((r["vehicle"], r["agent"], r["seq"], r["ts"], r["kind"], row[0]))
        stored[0] += len(batch["records"])

    def client() -> mqtt.Client:
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-floor-pg", clean_session=False)
        c.on_connect = lambda cl, *_a: cl.subscribe(UP_SUBSCRIPTION, qos=1)
        c.on_message = on_message
        c.connect("127.0.0.1", broker.port)
        return c

    def subscribe() -> None:
        c = client()
        c.loop_start()
        time.sleep(0.5)
        c.disconnect()
        c.loop_stop()

    try:
        _queue_backlog(broker, lines, subscribe)
        c = client()
        start = time.perf_counter()
        c.loop_start()
        _wait(lambda: stored[0] >= total)
        elapsed = time.perf_counter() - start
        c.disconnect()
        c.loop_stop()
    finally:
        conn.close()
    return total / elapsed


def _pg_durability(dsn: str) -> str:
    """The server settings both PostgreSQL arms commit under (neither arm changes them)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        shown = [f"{name} {conn.execute(f'SHOW {name}'.encode()).fetchone()[0]}"  # type: ignore[index]
                 for name in ("synchronous_commit", "fsync", "wal_sync_method")]
    return ", ".join(shown)


def _handle_only(payloads: list[bytes], total: int, folder: Path, trust: Trust) -> float:
    store = open_store(str(folder / "handle.db"))
    ingest = Ingest(store, lambda: frozenset({VEHICLE}))
    topic = up_topic(VEHICLE)
    start = time.perf_counter()
    for payload in payloads:
        ingest.handle(topic, payload)
    _verified(store, ChainVerifier(store, trust.ca_file, trust.keyring), total)
    elapsed = time.perf_counter() - start
    store.close()
    return total / elapsed


def main() -> None:
    """Run the benchmark and print records/s and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--postgres", metavar="DSN",
                        help="also measure PostgreSQL (a fresh schema per run), e.g. "
                        "postgresql://postgres@127.0.0.1:5432/test")
    add_repeat(parser)
    args = parser.parse_args()
    records = _records(args.records)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trust = make_trust(folder)
        batches = _batches(records, args.batch, trust.key)
        if len(batches) >= 65_535:
            raise SystemExit("keep the run under 65,535 messages (mosquitto_pub -l wraps its "
                             "message ids past that)")
        lines = folder / "payloads.jsonl"
        with lines.open("wb") as out:
            for chunk, cp in batches:
                out.write(encode_batch(VEHICLE, AGENT, chunk, compress=False, checkpoint=cp)
                          + b"\n")
        zstd = [encode_batch(VEHICLE, AGENT, chunk, checkpoint=cp) for chunk, cp in batches]
        cases: tuple[str, ...] = ("floor FULL", "floor NORMAL", "collector FULL",
                                  "collector NORMAL", "collector FULL, live rules running",
                                  "Ingest.handle only")
        if args.postgres:
            cases += ("floor PostgreSQL (COPY)", "collector PostgreSQL")
        rates: dict[str, list[float]] = {name: [] for name in cases}
        live_s: dict[str, list[float]] = {"collector FULL": [], "collector PostgreSQL": []}
        n = len(records)
        for run in range(args.repeat):
            # a fresh broker and fresh databases each round, so no run inherits another's state;
            # one run of every case per round (interleaved)
            round_dir = folder / f"run{run}"
            round_dir.mkdir()
            broker = Mosquitto(round_dir)
            broker.start()
            try:
                rates["floor FULL"].append(_floor(broker, lines, n, round_dir, "full"))
                rates["floor NORMAL"].append(_floor(broker, lines, n, round_dir, "normal"))
                rate, evaluation = _collector(broker, lines, n, round_dir, "full", trust)
                rates["collector FULL"].append(rate)
                live_s["collector FULL"].append(evaluation)
                rates["collector NORMAL"].append(
                    _collector(broker, lines, n, round_dir, "normal", trust)[0])
                rates["collector FULL, live rules running"].append(
                    _collector(broker, lines, n, round_dir, "full", trust, live=True)[0])
            finally:
                broker.stop()
            rates["Ingest.handle only"].append(_handle_only(zstd, n, round_dir, trust))
            if args.postgres:
                broker = Mosquitto(round_dir / "pg")
                broker.start()
                try:
                    with _pg_schema(args.postgres) as dsn:
                        rates["floor PostgreSQL (COPY)"].append(_floor_pg(broker, lines, n, dsn))
                    with _pg_schema(args.postgres) as dsn:
                        rate, evaluation = _collector(broker, lines, n, round_dir, "full", trust,
                                                      url=dsn)
                        rates["collector PostgreSQL"].append(rate)
                        live_s["collector PostgreSQL"].append(evaluation)
                finally:
                    broker.stop()
    figures = {name: Figure(tuple(r)) for name, r in rates.items()}
    durability = _pg_durability(args.postgres) if args.postgres else ""
    print(f"backlog of {n} chained records in {len(batches)} batches of {args.batch}, each with "
          f"a signed checkpoint; {args.repeat} interleaved rounds, records/s median (spread), "
          "ratio to the floor of the same backend and durability round by round")
    print("floor: a bare paho subscriber, json.loads, the payload stored as received plus its "
          "records' keys (SQLite: executemany; PostgreSQL: COPY), one transaction per message")
    if durability:
        print(f"PostgreSQL, both arms: {durability}")
    print("collector: decode, validate, hash and store every record with its chain hash, the "
          "chain verifier checking every link and checkpoint (clock stops when all are stored "
          f"and verified); {READERS} reader process(es) (ingest.readers' default here)")
    for name, fig in figures.items():
        floor = figures["floor NORMAL" if "NORMAL" in name else
                        "floor PostgreSQL (COPY)" if "PostgreSQL" in name else "floor FULL"]
        ratio = fig.ratio(floor)
        line = f"  {name:<36} {fig.show()} records/s"
        if not name.startswith("floor"):
            line += f"  {ratio.show('{:.2f}')}x floor"
        if name in live_s:
            line += f"  (issue 16 target >= 0.5x: {target(ratio.median >= 0.5)})"
        print(line)
        if name in live_s:
            seconds = Figure(tuple(live_s[name]))
            print(f"  {'':<36} live rules: one evaluation of the {n:,} records drained "
                  f"{seconds.show('{:.2f}')} s = {seconds.scaled(1e6 / n).show('{:.1f}')} µs "
                  "per arriving record")
    print(host_line())


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
