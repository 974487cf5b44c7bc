"""Collector ingest throughput: a backlog of batches drained from a private Mosquitto into the store.

    python -m bench.collector_ingest [--records 100000] [--batch 100] [--repeat 3] [--postgres DSN]

The batches are queued in the broker for a persistent session first (``mosquitto_pub -l``, one
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
- ``collector, rules reading``: ``collector`` while another thread re-reads the whole store
  (``collector.findings.stored_records``, the live rules' evaluator's read) every 0.5 s — far
  more often than the evaluator does (after 1 s of quiet, at most 15 s apart): how much its reads
  slow the ingest's commits.

With ``--postgres DSN`` two more cases per round, each in a fresh schema: the PostgreSQL floor
(the same bare subscriber, the payload in one row and its records' keys by ``COPY``) and the
collector storing into PostgreSQL.

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
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import psycopg
from paho.mqtt.enums import CallbackAPIVersion

from bench.common import Figure, add_repeat, host_line, target
from collector import registry as fleet
from collector.config import BrokerConfig
from collector.findings import evaluate_store, stored_records
from collector.ingest import Ingest
from collector.store import open_store
from frota.harness import Mosquitto
from frota.harness.postgres import private_schema
from protocols.records import ms_to_ts, ts_to_ms
from protocols.uplink import UP_SUBSCRIPTION, encode_batch, up_topic

VEHICLE = "ABC1D23"
AGENT = "bench-agent"
T0 = ts_to_ms("2026-03-02T00:00:00.000Z")


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
               reading: bool = False, url: str | None = None) -> float:
    name = f"{sync}-reading" if reading else sync
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
    ingest = Ingest(store, lambda: frozenset({VEHICLE}))
    live = ingest.state.vehicle(VEHICLE)
    stop = threading.Event()

    def read_all() -> None:  # the live evaluator's reads, every 0.5 s
        while not stop.wait(0.5):
            for _ in stored_records(store):
                pass

    reader = threading.Thread(target=read_all, name="reader", daemon=True)
    start = time.perf_counter()
    ingest.connect(config)
    if reading:
        reader.start()
    _wait(lambda: live.stored + live.duplicates >= total)
    elapsed = time.perf_counter() - start
    stop.set()
    if reading:
        reader.join()
    ingest.close()
    assert store.count(VEHICLE) == total, store.count(VEHICLE)
    store.close()
    return total / elapsed


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


def _live_rules(database: Path, folder: Path) -> float:
    """Seconds of one live evaluation of the store just drained (what the collector's live rules
    do after a burst: :func:`collector.findings.evaluate_store`, judged now)."""
    registry_path = folder / "fleet.json"
    registry_path.write_text(json.dumps({
        "lines": [], "drivers": [],
        "vehicles": [{"id": VEHICLE, "seats": 46, "capacity": 46}],
    }))
    store = open_store(str(database), create=False)
    try:
        start = time.perf_counter()
        evaluate_store(store, fleet.load(registry_path), time.time_ns() // 1_000_000)
        return time.perf_counter() - start
    finally:
        store.close()


def _handle_only(payloads: list[bytes], total: int, folder: Path) -> float:
    store = open_store(str(folder / "handle.db"))
    ingest = Ingest(store, lambda: frozenset({VEHICLE}))
    topic = up_topic(VEHICLE)
    start = time.perf_counter()
    for payload in payloads:
        ingest.handle(topic, payload)
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
    batches = [records[i : i + args.batch] for i in range(0, len(records), args.batch)]
    if len(batches) >= 65_535:
        raise SystemExit("keep the run under 65,535 messages (mosquitto_pub -l wraps its message ids past that)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        lines = folder / "payloads.jsonl"
        with lines.open("wb") as out:
            for batch in batches:
                out.write(encode_batch(VEHICLE, AGENT, batch, compress=False) + b"\n")
        zstd = [encode_batch(VEHICLE, AGENT, b) for b in batches]
        cases: tuple[str, ...] = ("floor FULL", "floor NORMAL", "collector FULL", "collector NORMAL",
                 "collector FULL, rules reading", "Ingest.handle only")
        if args.postgres:
            cases += ("floor PostgreSQL (COPY)", "collector PostgreSQL")
        rates: dict[str, list[float]] = {name: [] for name in cases}
        live_s: list[float] = []
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
                rates["collector FULL"].append(_collector(broker, lines, n, round_dir, "full"))
                live_s.append(_live_rules(round_dir / "collector-full.db", round_dir))
                rates["collector NORMAL"].append(_collector(broker, lines, n, round_dir, "normal"))
                rates["collector FULL, rules reading"].append(
                    _collector(broker, lines, n, round_dir, "full", reading=True))
            finally:
                broker.stop()
            rates["Ingest.handle only"].append(_handle_only(zstd, n, round_dir))
            if args.postgres:
                broker = Mosquitto(round_dir / "pg")
                broker.start()
                try:
                    with _pg_schema(args.postgres) as dsn:
                        rates["floor PostgreSQL (COPY)"].append(_floor_pg(broker, lines, n, dsn))
                    with _pg_schema(args.postgres) as dsn:
                        rates["collector PostgreSQL"].append(
                            _collector(broker, lines, n, round_dir, "full", url=dsn))
                finally:
                    broker.stop()
    figures = {name: Figure(tuple(r)) for name, r in rates.items()}
    print(f"backlog of {n} records in {len(batches)} batches of {args.batch}; {args.repeat} "
          "interleaved rounds, records/s median (spread), ratio to the floor of the same "
          "durability round by round")
    print("floor: a bare paho subscriber, json.loads, the payload stored as received plus its "
          "records' keys (executemany), one transaction per message")
    for name, fig in figures.items():
        floor = figures["floor NORMAL" if "NORMAL" in name else
                        "floor PostgreSQL (COPY)" if "PostgreSQL" in name else "floor FULL"]
        ratio = fig.ratio(floor)
        line = f"  {name:<30} {fig.show()} records/s"
        if not name.startswith("floor"):
            line += f"  {ratio.show('{:.2f}')}x floor"
        if name in ("collector FULL", "collector PostgreSQL"):
            line += (f"  (issue 16 target >= 0.5x: {target(ratio.median >= 0.5)}; measured without "
                     "signature verification, which the ingest does not do yet)")
        print(line)
        if name == "collector FULL":
            per_record = Figure(tuple(live_s)).scaled(1e6 / n)
            print(f"  {'':<30} live rules: one evaluation after the burst "
                  f"{Figure(tuple(live_s)).show('{:.2f}')} s = {per_record.show('{:.1f}')} µs per "
                  "arriving record (today they re-read the whole store: this grows with the store, "
                  "not with what arrived — issue 16 item 1)")
    print(host_line())


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
