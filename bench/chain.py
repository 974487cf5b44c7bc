"""What the chain costs (issue 12): ingest speed, bytes at rest, the agent's CPU.

    python -m bench.chain [--records 20000] [--batch 100] [--repeat 3]

1. Ingest: the same zstd batches (records with ``prev`` and a signed checkpoint per batch, made
   by a real agent buffer and key) through :meth:`collector.ingest.Ingest.handle` into a fresh
   SQLite store (``synchronous=FULL``), plus the live verifier's pass over what was stored
   (:meth:`collector.verifier.ChainVerifier.run_once`: every link and checkpoint). The baseline is
   the same ingest with the chain switched off in the bench (no record hash computed, no links,
   checkpoints or conflicts written, no verifier) — what the collector did before issue 12.
   Target: ratio >= 0.8. Both are measured twice: batch after batch through ``Ingest.handle``
   (one transaction each, the record hash never overlapping a commit; the verifier's pass after
   the last batch), and as ``frota collector run`` takes them (each message handed to the
   ingest as paho's thread does: read, checked and hashed by the collector's reader processes
   — ``ingest.readers``' default on this machine, collector/readers.py; the arm without the
   chain switches it off in the readers — while the ingest's worker commits up to 128 queued
   batches per transaction, and the verifier's thread runs beside them; no broker). The verifier runs every
   ``--verify-every`` seconds there (0.1: the collector's 2 s scaled to a run of well under a
   second, so that it works beside the ingest as it does on a steady stream, not only after
   it); the clock stops when every record is verified, in both. Beside the rates, the CPU
   time of the process per record (all its threads, and its reader processes'): on a shared
   machine the wall-clock
   ratio moves with the other processes' load, the CPU time much less.
2. Bytes at rest the chain adds per record: the collector's database file with and without the
   chain (after a WAL checkpoint and VACUUM), and the agent's buffer (``prev`` in each record's
   JSON and its ``hash`` column) against the same records without.
3. The agent's CPU per bus-hour for the chain: hashing each record as it is captured and signing
   one checkpoint per batch, at a bus's record rate (``--per-hour``, 1 Hz speed + 1 Hz position +
   driver, door and device records ≈ 7,500/h), measured on the same records.

Every measurement is run ``--repeat`` times interleaved (with, without, with, …) and printed as
the median and the spread (min–max), never the best run. A third arm, interleaved with the other
two, hashes records the way it was done before the one-pass canonical form
(``jcs(normalized(rec))``), so that change is measured in the same run. Before the repeats,
each ingest arm runs once unmeasured: the process's first store pays its first touches of
memory (≈ 1,300 page faults, ≈ 3.5 µs a record more on the commit), which otherwise land on
the arm that runs first — always the one with the chain.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as mqtt

from agent.buffer import Buffer
from bench.common import cpu_of, verified_seq
from collector import intake
from collector.config import IngestConfig
from collector.ingest import Ingest
from collector.intake import Prepared
from collector.readers import Known, read_batch
from collector.store import open_store
from collector.verifier import ChainVerifier
from protocols import identity
from protocols.chain import record_hash, sign_checkpoint
from protocols.keyring import entry_json, write_entries
from protocols.records import make_record, ms_to_ts
from protocols.uplink import encode_batch_json

VEHICLE = "ABC1D23"
#: Reader processes in the pipelined arms: ``ingest.readers``' default on this machine.
READERS = IngestConfig().reader_processes()
T0 = 1_772_460_000_000


def _records(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        ts = ms_to_ts(T0 + (i // 2) * 1000)
        if i % 2 == 0:
            out.append(make_record("speed", VEHICLE, ts, kmh=float(40 + i % 50), odometer_m=i * 20,
                                   ignition=True, device_seq=i // 2 + 1, raw="aa5529" + "0" * 40))
        else:
            out.append(make_record("position", VEHICLE, ts, lat=-23.5 + i * 1e-6, lon=-46.62,
                                   kmh=74.08, course=90.0, raw="2447" + "0" * 60))
    return out


class Fleet:
    """A CA, a bus key and a keyring in a folder; batches made by a real agent buffer."""

    def __init__(self, folder: Path, records: int, batch: int) -> None:
        self.records = records
        ca_key, self.ca_cert = identity.make_ca("bench CA")
        self.key = identity.new_signing_key()
        cert = identity.certify_signing_key(ca_key, self.ca_cert, VEHICLE, "vehicle",
                                            self.key.public_key())
        self.ca_file = folder / "ca.crt"
        self.ca_file.write_bytes(identity.cert_pem(self.ca_cert))
        self.keyring = folder / "keyring.json"
        write_entries(self.keyring, [entry_json(cert)])
        self.buffer_path = folder / "agent.sqlite"
        buf = Buffer(self.buffer_path)
        buf.add([("registrador", rec) for rec in _records(records)])
        rows = buf.pending(0, records)
        self.agent = buf.agent
        hashes = buf.hashes([seq for seq, _ in rows])
        buf.close()
        self.payloads: list[bytes] = []
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            last = chunk[-1][0]
            cp = sign_checkpoint(self.key, VEHICLE, self.agent, last, hashes[last]).json()
            self.payloads.append(encode_batch_json(VEHICLE, self.agent, [b for _, b in chunk],
                                                   checkpoint=cp))


@contextlib.contextmanager
def _chain_off() -> Iterator[None]:
    """The ingest as before issue 12: no record hash, no chain tables written."""
    import collector.ingest as ingest_module

    saved = getattr(intake, "record_hash")  # noqa: B009 (the function the bench switches off)
    saved_batch = getattr(intake, "record_hashes")  # noqa: B009
    original = intake.prepare

    def prepare(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        out.chain = None
        return out

    # no hash computed: none in the records' rows (their prev is the record's own field)
    setattr(intake, "record_hash", lambda rec: None)  # noqa: B010 (the bench's switch)
    setattr(intake, "record_hashes", lambda recs: [None] * len(recs))  # noqa: B010
    setattr(ingest_module, "prepare", prepare)  # noqa: B010
    try:
        yield
    finally:
        setattr(intake, "record_hash", saved)  # noqa: B010
        setattr(intake, "record_hashes", saved_batch)  # noqa: B010
        setattr(ingest_module, "prepare", original)  # noqa: B010


@contextlib.contextmanager
def _two_step_canonical() -> Iterator[None]:
    """The record hash as before the one-pass canonical form: ``jcs(normalized(rec))`` (the
    record copied twice, its timestamp written again), to measure that change in the same run."""
    from protocols import canonical

    saved = canonical._flat_record
    saved_batch = getattr(intake, "record_hashes")  # noqa: B009
    setattr(canonical, "_flat_record", lambda rec: None)  # noqa: B010 (the bench's switch)
    setattr(intake, "record_hashes", lambda recs: [None] * len(recs))  # noqa: B010
    try:
        yield
    finally:
        setattr(canonical, "_flat_record", saved)  # noqa: B010
        setattr(intake, "record_hashes", saved_batch)  # noqa: B010


def _read_without_chain(topic: str, payload: bytes, known: Known, received_ms: int,
                        max_payload_bytes: int) -> Prepared:
    """What a reader process runs in the arm without the chain: :func:`read_batch` under
    :func:`_chain_off` (the switch is made in the reader, where the batch is read)."""
    with _chain_off():
        out = read_batch(topic, payload, known, received_ms, max_payload_bytes)
        out.chain = None
        return out


def _feed(ingest: Ingest, topic: str, payloads: list[bytes], pipelined: bool,
          verifier: ChainVerifier | None = None) -> None:
    """Every payload through :meth:`Ingest.handle` one after the other, or (``pipelined``) as
    ``frota collector run`` takes them: each message handed to the ingest as paho's thread hands
    it (``Ingest._on_message``: to its reader processes, ``ingest.readers``' default here, or
    read in the thread when there are none) while the ingest's worker commits up to ``GROUP``
    queued batches per transaction (no broker: nothing is acknowledged)."""
    if not pipelined:
        for payload in payloads:
            ingest.handle(topic, payload)
        return
    worker = threading.Thread(target=ingest._work, name="collector-ingest")
    worker.start()
    if verifier is not None:
        verifier.start()
    for payload in payloads:
        message = mqtt.MQTTMessage(topic=topic.encode())
        message.payload = payload
        ingest._on_message(message)
    ingest._queue.put(None)
    worker.join()
    if verifier is not None:
        verifier.stop()


def _readers_cpu(ingest: Ingest) -> float:
    """CPU seconds the ingest's reader processes have used so far (0 without readers)."""
    readers = ingest._readers
    if readers is None:
        return 0.0
    return sum(cpu_of(pid) for pid in list(readers._pool._processes))


def _ingest(fleet: Fleet, folder: Path, chain: bool, two_step: bool = False,
            pipelined: bool = False, verify_every: float = 0.1) -> tuple[float, float, int]:
    """Seconds to ingest every batch (and verify, with the chain), the process's CPU seconds
    for it; the database's size."""
    db = folder / f"collector-{'chain' if chain else 'plain'}-{time.monotonic_ns()}.db"
    store = open_store(str(db))
    # the pipelined arms read as frota collector run does: in reader processes (ingest.readers'
    # default on this machine), started before the clock as a running collector's are; the arm
    # without the chain switches it off in the readers
    ingest = Ingest(store, lambda: frozenset({VEHICLE}),
                    readers=READERS if pipelined else 0,
                    read=read_batch if chain else _read_without_chain)
    ingest.start_readers()
    topic = f"frota/v1/{VEHICLE}/up"
    with contextlib.ExitStack() as stack:
        if not chain:
            stack.enter_context(_chain_off())
        if two_step:
            stack.enter_context(_two_step_canonical())
        start = time.perf_counter()
        cpu = time.process_time() + _readers_cpu(ingest)
        # the verifier exists before the first batch, as in frota collector run (which starts
        # it with the ingest): the ingest hands it the stretches it checked as it commits them
        verifier = (ChainVerifier(store, fleet.ca_file, fleet.keyring, interval_s=verify_every)
                    if chain else None)
        _feed(ingest, topic, fleet.payloads, pipelined, verifier if pipelined else None)
        if verifier is not None:  # what is left to verify
            seq = verified_seq(store, verifier, VEHICLE, fleet.agent)
            assert seq == fleet.records, f"verified up to seq {seq} of {fleet.records}"
        seconds = time.perf_counter() - start
        cpu = time.process_time() + _readers_cpu(ingest) - cpu
    ingest.close()
    bad = int(store._read("SELECT count(*) FROM integrity")[0][0])
    assert bad == 0, f"{bad} integrity events on genuine records"
    store.close()
    with contextlib.closing(__import__("sqlite3").connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    size = os.path.getsize(db)
    for path in db.parent.glob(db.name + "*"):
        path.unlink()
    return seconds, cpu, size


def _agent_cpu(records: list[dict[str, Any]], batch: int, key: Any) -> tuple[float, float]:
    """CPU seconds to hash ``records`` and sign one checkpoint per batch; and the same records'
    serialisation without the chain (the agent's work before)."""
    body: list[dict[str, Any]] = []
    start = time.process_time()
    prev = "0" * 64
    for seq, rec in enumerate(records, 1):
        out = {**rec, "agent": "a", "seq": seq, "prev": prev}
        orjson.dumps(out)
        prev = record_hash(out)
        if seq % batch == 0:
            sign_checkpoint(key, VEHICLE, "a", seq, prev)
        body.append(out)
    chained = time.process_time() - start
    start = time.process_time()
    for seq, rec in enumerate(records, 1):
        orjson.dumps({**rec, "agent": "a", "seq": seq})
    plain = time.process_time() - start
    return chained, plain


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} (spread {min(values):.3f}–{max(values):.3f})"


def _interleaved(repeat: int, *runs: Callable[[], float]) -> list[list[float]]:
    out: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for i, run in enumerate(runs):
            out[i].append(run())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-hour", type=int, default=7_500,
                        help="a bus's records per hour (default 7500)")
    parser.add_argument("--verify-every", type=float, default=0.1,
                        help="seconds between the verifier's passes beside the pipelined "
                        "ingest (default 0.1)")
    args = parser.parse_args()
    repeat = max(3, args.repeat)
    with tempfile.TemporaryDirectory(prefix="frota-bench-chain-") as tmp:
        folder = Path(tmp)
        fleet = Fleet(folder, args.records, args.batch)
        sizes: dict[bool, int] = {}
        cpus: dict[tuple[bool, bool, bool], list[float]] = {}

        def run(chain: bool, two_step: bool = False, pipelined: bool = False
                ) -> Callable[[], float]:
            def once() -> float:
                seconds, cpu, size = _ingest(fleet, folder, chain, two_step, pipelined,
                                             args.verify_every)
                if not two_step:
                    sizes[chain] = size
                cpus.setdefault((chain, two_step, pipelined), []).append(
                    cpu / args.records * 1e6)
                return float(args.records) / seconds
            return once

        arms = (run(True), run(False), run(True, two_step=True), run(True, pipelined=True),
                run(False, pipelined=True))
        for arm in arms:  # warm-up, not measured: the first store's first touches of memory
            arm()
        cpus.clear()
        with_chain, without, two_step, piped_chain, piped = _interleaved(repeat, *arms)

        def cpu_line(pipelined: bool) -> str:
            chained, plain = cpus[(True, False, pipelined)], cpus[(False, False, pipelined)]
            ratios = [b / a for a, b in zip(chained, plain, strict=True)]
            return (f"  CPU per record (all threads): without {_spread(plain)} µs, with "
                    f"{_spread(chained)} µs; ratio {_spread(ratios)}")
        ratios = [a / b for a, b in zip(with_chain, without, strict=True)]
        before = [a / b for a, b in zip(two_step, without, strict=True)]
        piped_ratios = [a / b for a, b in zip(piped_chain, piped, strict=True)]
        print(f"ingest of {args.records} records in batches of {args.batch} (Ingest.handle, "
              f"SQLite FULL), {repeat} interleaved repeats, median (spread):")
        print(f"  without the chain             {_spread(without)} records/s")
        print(f"  with chain + verification     {_spread(with_chain)} records/s")
        print(f"  ratio                         {_spread(ratios)}   target >= 0.8")
        print(cpu_line(False))
        print(f"  with chain, two-step canonical form (before the one-pass path): "
              f"{_spread(two_step)} records/s, ratio {_spread(before)}")
        print(f"  the same through the collector's pipeline ({READERS} reader process(es) read "
              "and check each batch — none: one thread — while the worker commits up to 128 "
              f"per transaction and the verifier's thread runs every {args.verify_every} s, as "
              "frota collector run; CPU includes the readers'):")
        print(f"  without the chain             {_spread(piped)} records/s")
        print(f"  with chain + verification     {_spread(piped_chain)} records/s")
        print(f"  ratio                         {_spread(piped_ratios)}   target >= 0.8")
        print(cpu_line(True))
        print(f"bytes at rest per record the chain adds: collector "
              f"{(sizes[True] - sizes[False]) / args.records:.1f} "
              f"(database {sizes[False] / args.records:.0f} -> {sizes[True] / args.records:.0f})")
        buf = Buffer(fleet.buffer_path)
        # Since 0008-compact-bodies a row keeps prev as its 32 bytes and no hash (the next
        # row's prev); rows the split does not fit keep prev in their JSON and their hash.
        (chain_bytes,) = buf.conn.execute(
            "SELECT sum(CASE WHEN prev IS NOT NULL THEN length(prev) ELSE "
            "coalesce(length(hash), 0) + length(json_extract(body, '$.prev')) + 10 END) "
            "FROM records").fetchone()
        buf.close()
        print(f"  agent buffer: {chain_bytes / args.records:.1f} bytes per record "
              "(prev as 32 bytes in its own column)")
        recs = _records(args.per_hour)

        def chained() -> float:
            return _agent_cpu(recs, args.batch, fleet.key)[0]

        def plain() -> float:
            return _agent_cpu(recs, args.batch, fleet.key)[1]

        cpu = _interleaved(repeat, chained, plain)
        added = [a - b for a, b in zip(cpu[0], cpu[1], strict=True)]
        print(f"agent CPU per bus-hour ({args.per_hour} records, a checkpoint per "
              f"{args.batch}): chain {_spread(added)} s on top of "
              f"{_spread(cpu[1])} s serialising")
        print(f"(host: {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end)")


if __name__ == "__main__":
    main()
