"""The agent's buffer against thingsboard-gateway's SQLite storage, durability on for both: write
(records handed over → committed) and drain (read a batch, confirm it, until empty).

    .venv/bin/python -m bench.agent_buffer [--records 50000] [--batch 1000] [--repeat 3]

Needs thingsboard-gateway 3.8.5 in the virtualenv, for this benchmark only (its storage uses the
standard library alone; ``--no-deps`` keeps its pinned MQTT client from replacing paho-mqtt)::

    .venv/bin/pip install --no-deps thingsboard-gateway==3.8.5

Both get the same ``--records`` realistic records of one bus (``bench.busday``: registrador and
GPS at 1 Hz with their raw frames, door counts) in a fresh folder on the same disk, each round:

- **write**: from the first record handed over until the last is committed. Frota: the agent's
  writer thread (``agent.writer.BufferWriter``, the production defaults of
  ``firmware-notes/agent-config.md``), one ``put_many`` per device frame as the decoders hand
  them over (which prepares each record's JSON and canonical form in the caller's thread, as
  in the agent); the records are chained, numbered and checked for frames already captured.
  thingsboard-gateway: ``SQLiteEventStorage.put`` of each record's JSON (serialized in the timed
  loop, as the gateway does before ``put``), committed by its own writer thread; the clock stops
  when its ``messages`` table holds them all (watched from another connection).
- **drain**: from a store holding the records, read ``--batch`` records and confirm them, until
  none is left. Frota: ``Buffer.pending`` and, per batch, what the uplink does with the
  collector's ack (the chain hash it binds to, the range still pending, ``Buffer.mark``).
  thingsboard-gateway: ``get_event_pack`` then ``event_pack_processing_done`` (which deletes the
  pack) with ``max_read_records_count = --batch``. The network is left out of both: this is the
  stores' own cost (``bench.drain`` measures the agent's whole path to the collector).

Durability: both acknowledge nothing to the source before the commit — a record handed over is
in a queue in memory until its commit (Frota's ``put_many``, thingsboard-gateway's ``put``,
which returns once queued), and a power cut loses what is queued on both. Frota's buffer runs
SQLite in WAL mode with ``synchronous=FULL`` (each commit's WAL frames reach the disk before
the commit returns: a committed record survives a power cut), and what a source is told was
captured (the registrador's catch-up floor, the door counters' baselines) is committed in the
same transaction as its records.
thingsboard-gateway's storage opens its database with ``synchronous=NORMAL`` and offers no
setting for it; in WAL mode NORMAL may lose the last commits on a power cut, so its durable run
sets ``synchronous=FULL`` on its connection (all its other pragmas as shipped). Its stock
setting (NORMAL) is measured too, for reference. Before the clock starts the benchmark's own
objects are frozen out of the garbage collector (``gc.freeze``): thingsboard-gateway calls
``gc.collect()`` after every pack, which would otherwise scan this process's copy of the records.

The cases run ``--repeat`` times (at least 3), interleaved; printed: median and spread of
records/s, and Frota ÷ thingsboard-gateway (durable) round by round against issue 16's targets:
write ≥ 1× (goal ≥ 2×), drain ≥ 1×; for the write also the process's CPU time per record on
each side, in the same window (a shared machine's load moves the wall-time ratio: Frota's write
is bound by CPU, thingsboard-gateway's by its ``fsync``s; its CPU includes the benchmark's
polling of its table), and the CPU of a floor in the same rounds (``floor_write``: the same
rows' JSON, canonical form, chain, INSERT and COMMIT as the least Python does them, nothing
checked, in one thread — what the write would cost if every check, the frame runs and the
hand-over between threads were free). Then, once: bytes per record at rest in each store's
database file (WAL checkpointed, VACUUM).
"""

from __future__ import annotations

import argparse
import binascii
import gc
import hashlib
import importlib
import logging
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agent.buffer import Buffer
from agent.config import BufferConfig
from agent.writer import BufferWriter
from bench.busday import day_of_records
from bench.common import Figure, add_repeat, host_line, target
from protocols.records import Record

TB_VERSION = "3.8.5"
TB_STORAGE = "thingsboard_gateway.storage.sqlite.sqlite_event_storage"
TB_CONNECTOR = "thingsboard_gateway.storage.sqlite.database_connector"
#: The longest any case may take before the benchmark gives up (seconds).
GIVE_UP_S = 600.0

Items = list[tuple[str, Record]]


def _tb_modules() -> tuple[Any, Any]:
    """thingsboard-gateway's storage and connector modules; exit 2 saying how to install them."""
    try:
        return importlib.import_module(TB_STORAGE), importlib.import_module(TB_CONNECTOR)
    except ImportError:
        print(f"bench.agent_buffer needs thingsboard-gateway {TB_VERSION} (for this benchmark "
              f"only): .venv/bin/pip install --no-deps thingsboard-gateway=={TB_VERSION}",
              file=sys.stderr)
        raise SystemExit(2) from None


def frames(items: Items) -> list[tuple[str, list[Record]]]:
    """The records grouped as the decoders hand them over: one group per device frame (the
    consecutive records of one source with the same ``device_seq``), else one per record."""
    out: list[tuple[str, list[Record]]] = []
    key: tuple[str, int] | None = None
    for source, rec in items:
        seq = rec.get("device_seq")
        if seq is not None and out and key == (source, seq):
            out[-1][1].append(rec)
            continue
        key = (source, seq) if seq is not None else None
        out.append((source, [rec]))
    return out


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GIVE_UP_S
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.agent_buffer: {what} did not finish in {GIVE_UP_S:.0f} s")
        time.sleep(0.002)


class ThingsboardStorage:
    """thingsboard-gateway's SQLite storage in a folder, ``synchronous`` set as asked."""

    def __init__(self, folder: Path, batch: int, synchronous: str) -> None:
        storage_mod, connector_mod = _tb_modules()
        connector = connector_mod.DatabaseConnector
        shipped = connector.__dict__.get("_frota_shipped_connect", connector.connect)
        connector._frota_shipped_connect = shipped

        def connect(self: Any) -> None:
            shipped(self)
            if self.connection is not None:
                self.connection.execute(f"PRAGMA synchronous={synchronous}")

        connector.connect = connect
        log = logging.getLogger("bench.thingsboard")
        log.trace = lambda *_a, **_k: None  # type: ignore[attr-defined]  # its own log level
        self.path = folder / "data.db"
        self.storage = storage_mod.SQLiteEventStorage(
            {"data_file_path": f"{folder}/", "size_limit": 100_000, "max_db_amount": 10,
             "max_read_records_count": batch, "writing_batch_size": 1000},
            log, threading.Event())

    def stored(self) -> int:
        """How many records its database holds (from another connection)."""
        conn = sqlite3.connect(self.path)
        try:
            (largest,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()
            return int(largest)
        finally:
            conn.close()

    def write(self, items: Items) -> None:
        """Hand every record over as the gateway does (its JSON) and wait for the commits."""
        put = self.storage.put
        for _source, rec in items:
            put(orjson.dumps(rec).decode())
        target_count = len(items)
        _wait(lambda: self.stored() >= target_count, "thingsboard-gateway's write")

    def drain(self, count: int) -> None:
        """Read and confirm packs until ``count`` records came back."""
        got = 0
        deadline = time.monotonic() + GIVE_UP_S
        while got < count:
            pack = self.storage.get_event_pack()
            got += len(pack)
            self.storage.event_pack_processing_done()
            if time.monotonic() > deadline:
                raise SystemExit("bench.agent_buffer: thingsboard-gateway's drain did not finish")

    def stop(self) -> None:
        """Stop its threads."""
        self.storage.stop()


def frota_write(folder: Path, groups: list[tuple[str, list[Record]]], count: int
                ) -> tuple[float, float]:
    """The agent's writer thread captures every group; seconds from the first group handed over
    until the last commit (the buffer made and its thread started before, its close after: as
    thingsboard-gateway's storage is made before its clock starts and stopped after), and the
    process's CPU seconds meanwhile."""
    defaults = BufferConfig.model_fields  # the production defaults (agent-config.md)
    writer = BufferWriter(
        folder / "buffer.sqlite", defaults["commit_records"].default,
        defaults["commit_interval_ms"].default,
        reserve_bytes=int(defaults["reserve_mb"].default * 1024 * 1024))
    writer.start()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        for source, records in groups:
            writer.put_many(source, records)
        _wait(lambda: writer.captured >= count or not writer.alive, "Frota's write")
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        if writer.captured < count:
            raise SystemExit(f"bench.agent_buffer: Frota's writer stopped: {writer.error}")
    finally:
        writer.stop()
    return took, cpu


#: The floor's INSERT: nine columns as the buffer's compact rows bind them (seven a row).
_FLOOR_ROW = "(?, ?, ?, ?, ?, ?, 0, NULL, ?)"
_FLOOR_ROWS = 200


def floor_write(folder: Path, items: Items, commit: int) -> tuple[float, float]:
    """What the least Python can do for the same rows, in one thread, with nothing checked: per
    commit of ``commit`` records, each record's JSON and its canonical form with ``agent``,
    ``seq`` and ``prev`` (``orjson``, keys sorted), the chain (the previous hash written in,
    SHA-256), the rows inserted ``_FLOOR_ROWS`` a statement into a table shaped as the buffer's
    (its time index), COMMIT with ``synchronous=FULL`` in WAL mode. Not a store (no frame runs,
    no precision or timestamp checks, no hand-over between threads, orjson's ``40.0`` left as
    it is): the floor under Frota's write in Python. Seconds and the process's CPU seconds."""
    conn = sqlite3.connect(folder / "floor.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, ts_ms INTEGER, kind TEXT, "
                 "source TEXT, device_seq INTEGER, body TEXT, captured_ms INTEGER, hash BLOB, "
                 "prev BLOB)")
    conn.execute("CREATE INDEX records_ts ON records (ts_ms)")
    agent, placeholder = "6f1c0d8e-3b55-4a1e-9a43-0c2f3f7e9b10", "0" * 64
    pair_open, hole = b'"prev":"', b'"prev":"' + b"0" * 64 + b'"'
    sql = "INSERT INTO records VALUES " + ", ".join([_FLOOR_ROW] * _FLOOR_ROWS)
    sha256, sort = hashlib.sha256, orjson.OPT_SORT_KEYS
    start, cpu = time.perf_counter(), time.process_time()
    prev, seq = b"\0" * 32, 1
    for at in range(0, len(items), commit):
        part = items[at : at + commit]
        sent = [orjson.dumps(rec).decode() for _, rec in part]
        chained = [prev]
        pair = pair_open + binascii.hexlify(prev) + b'"'
        for n, (_, rec) in enumerate(part):
            form = orjson.dumps({**rec, "agent": agent, "seq": seq + n, "prev": placeholder},
                                option=sort).decode().encode()
            digest = sha256(form.replace(hole, pair, 1)).digest()
            chained.append(digest)
            pair = pair_open + binascii.hexlify(digest) + b'"'
        prev = chained.pop()
        rows = list(zip(range(seq, seq + len(part)), [0] * len(part),
                        [rec["kind"] for _, rec in part], [source for source, _ in part],
                        [rec.get("device_seq") for _, rec in part], sent, chained,
                        strict=True))
        conn.execute("BEGIN")
        for first in range(0, len(rows), _FLOOR_ROWS):
            chunk = rows[first : first + _FLOOR_ROWS]
            if len(chunk) == _FLOOR_ROWS:
                conn.execute(sql, [value for row in chunk for value in row])
            else:
                conn.executemany(f"INSERT INTO records VALUES {_FLOOR_ROW}", chunk)
        conn.execute("COMMIT")
        seq += len(part)
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    conn.close()
    return took, cpu


def frota_drain(path: Path, batch: int) -> int:
    """Read and confirm batches as the uplink does with the collector's acks; records drained."""
    buf = Buffer(path)
    drained = 0
    try:
        after = 0
        while rows := buf.pending(after, batch):
            first, last = rows[0][0], rows[-1][0]
            buf.hashes([last])  # the ack's hash is bound to the agent's own record
            if buf.pending_in(first, last):
                buf.mark([(first, last)], [])
            after = last
            drained += len(rows)
    finally:
        buf.close()
    return drained


def bytes_at_rest(folder: Path, items: Items, batch: int) -> tuple[float, float]:
    """Bytes per record of each store's database file holding ``items``, WAL checkpointed and
    the file vacuumed (deterministic: measured once)."""
    buf = Buffer(folder / "buffer.sqlite")
    for i in range(0, len(items), batch):
        buf.add(items[i : i + batch])
    buf.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    buf.conn.execute("VACUUM")
    buf.close()
    tb = ThingsboardStorage(folder / "tb", batch, "FULL")
    try:
        tb.write(items)
    finally:
        tb.stop()
    time.sleep(0.5)  # its threads close their connection
    conn = sqlite3.connect(tb.path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    n = len(items)
    return (folder / "buffer.sqlite").stat().st_size / n, tb.path.stat().st_size / n


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000, help="records per drained batch")
    add_repeat(parser)
    args = parser.parse_args()
    _tb_modules()
    items = day_of_records(args.records)
    commit_records = int(BufferConfig.model_fields["commit_records"].default)
    groups = frames(items)
    n = len(items)
    seconds: dict[str, list[float]] = {k: [] for k in (
        "frota write", "tb write", "tb stock write", "frota drain", "tb drain", "tb stock drain")}
    cpu: dict[str, list[float]] = {"frota write": [], "tb write": [], "floor write": []}
    gc.collect()
    gc.freeze()
    with tempfile.TemporaryDirectory(dir=Path.cwd(), prefix=".bench-agent-buffer-") as tmp:
        root = Path(tmp)
        for run in range(args.repeat):
            folder = root / f"frota{run}"
            folder.mkdir()
            took, used = frota_write(folder, groups, n)
            seconds["frota write"].append(took)
            cpu["frota write"].append(used)
            start = time.perf_counter()
            drained = frota_drain(folder / "buffer.sqlite", args.batch)
            seconds["frota drain"].append(time.perf_counter() - start)
            assert drained == n, (drained, n)
            shutil.rmtree(folder)
            folder = root / f"floor{run}"
            folder.mkdir()
            cpu["floor write"].append(floor_write(folder, items, commit_records)[1])
            shutil.rmtree(folder)
            for name, sync in (("tb", "FULL"), ("tb stock", "NORMAL")):
                folder = root / f"{name.replace(' ', '-')}{run}"
                folder.mkdir()
                tb = ThingsboardStorage(folder, args.batch, sync)
                try:
                    start, used = time.perf_counter(), time.process_time()
                    tb.write(items)
                    seconds[f"{name} write"].append(time.perf_counter() - start)
                    if name == "tb":
                        cpu["tb write"].append(time.process_time() - used)
                    start = time.perf_counter()
                    tb.drain(n)
                    seconds[f"{name} drain"].append(time.perf_counter() - start)
                finally:
                    tb.stop()
                shutil.rmtree(folder)
        (root / "rest" / "tb").mkdir(parents=True)
        frota_bytes, tb_bytes = bytes_at_rest(root / "rest", items, args.batch)
    gc.unfreeze()
    fig = {k: Figure(tuple(v)) for k, v in seconds.items()}
    print(f"bench.agent_buffer: {n:,} records of one bus ({len(groups):,} device frames), drained "
          f"in batches of {args.batch}; {args.repeat} interleaved rounds, median (spread) "
          "records/s")
    for what in ("write", "drain"):
        print(f"{what}:")
        print(f"  Frota buffer (WAL, synchronous=FULL):             "
              f"{fig[f'frota {what}'].per(n).show()}")
        print(f"  thingsboard-gateway {TB_VERSION} (WAL, synchronous=FULL): "
              f"{fig[f'tb {what}'].per(n).show()}")
        print(f"  thingsboard-gateway as shipped (synchronous=NORMAL, not durable on a power "
              f"cut): {fig[f'tb stock {what}'].per(n).show()}")
        ratio = fig[f"tb {what}"].ratio(fig[f"frota {what}"])  # time ratio = rate ratio
        goal = (f"target >= 1x: {target(ratio.median >= 1)}, goal >= 2x: "
                f"{target(ratio.median >= 2)}" if what == "write"
                else f"target >= 1x: {target(ratio.median >= 1)}")
        print(f"  Frota ÷ thingsboard-gateway (durable): {ratio.show('{:.2f}')}x  ({goal})")
        if what == "write":  # the CPU both spend: what the load moves least
            frota_cpu, tb_cpu = Figure(tuple(cpu["frota write"])), Figure(tuple(cpu["tb write"]))
            print(f"  CPU of the process, µs a record: Frota {frota_cpu.scaled(1e6 / n).show('{:.1f}')}"
                  f"; thingsboard-gateway (durable) {tb_cpu.scaled(1e6 / n).show('{:.1f}')}; "
                  f"Frota ÷ thingsboard-gateway in CPU {tb_cpu.ratio(frota_cpu).show('{:.2f}')}x")
            floor = Figure(tuple(cpu["floor write"]))
            print(f"  the floor in Python (the same rows' JSON, canonical form, chain, INSERT "
                  f"and COMMIT; nothing checked, one thread), CPU µs a record: "
                  f"{floor.scaled(1e6 / n).show('{:.1f}')}; its ÷ thingsboard-gateway in CPU "
                  f"{tb_cpu.ratio(floor).show('{:.2f}')}x")
    print(f"bytes per record at rest (database file after VACUUM, indexes included): Frota "
          f"{frota_bytes:,.1f} (the record's JSON without agent/seq/prev, prev as 32 bytes, "
          f"upload state, frame runs); thingsboard-gateway {tb_bytes:,.1f} (the record's JSON, "
          "no chain)")
    print(host_line())


if __name__ == "__main__":
    main()
