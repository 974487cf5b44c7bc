"""The ingest's reader processes (collector/readers.py, ``ingest.readers``): batches read in
another process are stored and answered as without them, in arrival order; a reader process
that dies loses nothing; a payload that kills it twice is rejected whole; a closing collector
never hangs on a full queue."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from collector.config import BrokerConfig, IngestConfig, default_readers
from collector.ingest import QUEUE_DEPTH, Ingest
from collector.intake import Prepared
from collector.readers import DIED_READING, BatchReaders, Known, read_batch
from collector.store import Store, open_store
from frota.harness.services import CollectorProcess, write_collector_files
from protocols.uplink import Ack, encode_batch, up_topic
from tests.collector.helpers import FLEET, VEHICLES, AgentSide, speed
from tests.services import Mosquitto

pytestmark = pytest.mark.mosquitto

V1, V2 = VEHICLES
STRANGER = "ZZZ9Z99"
#: A payload holding this kills the reader process that reads it (_dies_on_poison).
POISON = "poison-pill"


def _known() -> frozenset[str]:
    return frozenset(VEHICLES)


def _dies_on_poison(topic: str, payload: bytes, known: Known, received_ms: int,
                    max_payload_bytes: int) -> Prepared:
    """read_batch, but the process exits at once on a payload holding POISON (as a crash in a
    C library would end it)."""
    if POISON.encode() in payload:
        os._exit(70)
    return read_batch(topic, payload, known, received_ms, max_payload_bytes)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(str(tmp_path / "collector.db"))
    try:
        yield opened
    finally:
        opened.close()


def _ingest(store: Store, mosquitto: Mosquitto, name: str = "readers-test",
            **kwargs: object) -> Ingest:
    ingest = Ingest(store, _known, readers=1, **kwargs)  # type: ignore[arg-type]
    ingest.connect(BrokerConfig(url=mosquitto.url, client_id=name))
    deadline = time.monotonic() + 10
    while not ingest.state.subscribed:  # SUBACK: a batch published now reaches it
        assert time.monotonic() < deadline, "the collector never subscribed"
        time.sleep(0.05)
    return ingest


def _payload(vehicle: str, agent: str, seqs: range, **extra: Any) -> bytes:
    # plain JSON (not zstd): the poison is seen in the bytes
    return encode_batch(vehicle, agent, [speed(vehicle, agent, n, **extra) for n in seqs],
                        compress=False)


def test_the_default_is_one_reader_where_there_are_two_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert default_readers() == (1 if cores >= 2 else 0)
    assert IngestConfig().reader_processes() == default_readers()
    assert IngestConfig(readers=0).reader_processes() == 0
    assert IngestConfig(readers=3).reader_processes() == 3


def test_batches_read_in_a_reader_are_stored_and_answered_in_order(
        store: Store, mosquitto: Mosquitto, agent: AgentSide) -> None:
    ingest = _ingest(store, mosquitto)
    try:
        for first in range(1, 41, 4):  # ten batches of four, one after the other
            agent.publish(V1, _payload(V1, "a1", range(first, first + 4)))
        agent.publish(V2, b"{not json")
        agent.publish(STRANGER, _payload(STRANGER, "s1", range(1, 3)),
                      topic=up_topic(STRANGER))
        acks = [agent.wait_ack(V1) for _ in range(10)]
        # answered in the order the batches were published
        assert [ack.stored for ack in acks] == [[(n, n + 3)] for n in range(1, 41, 4)]
        stranger = agent.wait_ack(STRANGER)
        # the registry's answer crossed to the reader: unknown, retryable
        assert stranger.stored == []
        assert stranger.retryable == [True]
        assert "unknown vehicle" in stranger.rejected[0][2]
    finally:
        ingest.close()
    assert store.count(V1) == 40
    assert store.count(STRANGER) == 0
    # the unreadable payload and the stranger's batch are kept with their reasons
    assert store.reject_count() == 2


def test_a_reader_killed_mid_run_loses_nothing(
        store: Store, mosquitto: Mosquitto, agent: AgentSide) -> None:
    ingest = _ingest(store, mosquitto)
    readers = ingest._readers
    assert readers is not None
    try:
        agent.publish(V1, _payload(V1, "a1", range(1, 3)))
        assert agent.wait_ack(V1).stored == [(1, 2)]
        pids = list(readers._pool._processes)  # the running reader processes
        assert pids
        for pid in pids:
            os.kill(pid, 9)
        for first in range(3, 23, 4):
            agent.publish(V1, _payload(V1, "a1", range(first, first + 4)))
        acks = [agent.wait_ack(V1) for _ in range(5)]
        assert [ack.stored for ack in acks] == [[(n, n + 3)] for n in range(3, 23, 4)]
        assert readers.restarts >= 1
        assert set(readers._pool._processes).isdisjoint(pids)
    finally:
        ingest.close()
    assert store.count(V1) == 22
    assert store.reject_count() == 0


def test_a_payload_that_kills_the_reader_twice_is_rejected_and_the_rest_goes_on(
        store: Store, mosquitto: Mosquitto, agent: AgentSide) -> None:
    ingest = _ingest(store, mosquitto, read=_dies_on_poison)
    try:
        agent.publish(V1, _payload(V1, "a1", range(1, 3)))
        agent.publish(V1, _payload(V1, "a1", range(3, 5), note=POISON))
        agent.publish(V1, _payload(V1, "a1", range(5, 7)))
        first, poisoned, after = (agent.wait_ack(V1) for _ in range(3))
        assert first.stored == [(1, 2)]
        assert poisoned.stored == []
        assert poisoned.rejected == [(3, 4, DIED_READING)]
        assert poisoned.retryable == [False]
        assert after.stored == [(5, 6)]
        readers = ingest._readers
        assert readers is not None
        assert readers.restarts == 2  # once read again, then it died again
    finally:
        ingest.close()
    assert store.count(V1) == 4
    [(reason, payload)] = store._read("SELECT reason, payload FROM rejects")
    assert reason == DIED_READING
    assert POISON.encode() in bytes(payload)  # kept whole, as received


def test_closing_with_a_full_queue_does_not_hang_and_loses_nothing(
        store: Store, mosquitto: Mosquitto) -> None:
    # a broker that sends without waiting for PUBACKs (no in-flight limit) and a store that
    # commits slowly: the queue fills (QUEUE_DEPTH batches) and paho's thread waits to queue
    # the next while close() stops the worker
    mosquitto.stop()
    mosquitto.conf.write_text(mosquitto.conf.read_text().replace(
        "max_inflight_messages 100", "max_inflight_messages 0"), encoding="utf-8")
    mosquitto.start()
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="closing-agent")
    publisher.max_inflight_messages_set(1000)  # the batches reach the broker at once
    publisher.connect("127.0.0.1", mosquitto.port)
    publisher.loop_start()
    slow = threading.Event()
    put_many = store.put_many

    def slow_put_many(*args: object, **kwargs: object) -> list[int]:
        if not slow.is_set():
            time.sleep(0.3)
        return put_many(*args, **kwargs)  # type: ignore[arg-type]

    store.put_many = slow_put_many  # type: ignore[method-assign]
    total = QUEUE_DEPTH * 3  # more than the queue holds behind the stop marker
    ingest = _ingest(store, mosquitto, name="closing-test")
    for seq in range(1, total + 1):
        publisher.publish(up_topic(V1), _payload(V1, "a1", range(seq, seq + 1)), qos=1)
    deadline = time.monotonic() + 20
    while not ingest._queue.full():  # paho's thread now waits to queue the next batch
        assert time.monotonic() < deadline, "the queue never filled"
        time.sleep(0.01)
    closing = threading.Thread(target=ingest.close)
    closing.start()
    closing.join(60)  # a hang would never end: the bound only keeps the suite from waiting forever
    assert not closing.is_alive(), "close() hung behind the full queue"
    slow.set()
    # what was not PUBACKed is delivered again to the collector's next session
    again = _ingest(store, mosquitto, name="closing-test")
    try:
        deadline = time.monotonic() + 30
        while store.count(V1) < total:
            assert time.monotonic() < deadline, f"only {store.count(V1)} of {total} stored"
            time.sleep(0.05)
    finally:
        again.close()
        publisher.loop_stop()
        publisher.disconnect()
    assert store.count(V1) == total


def test_reader_processes_need_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        BatchReaders(0)


def test_an_ack_read_by_a_reader_is_the_same_as_read_in_the_thread(store: Store) -> None:
    readers = BatchReaders(1)
    try:
        payload = _payload(V1, "a1", range(1, 4))
        topic = up_topic(V1)
        reading = readers.submit(topic, payload, Known.of(topic, _known()), 1_000, 1 << 20)
        there = readers.result(reading)
    finally:
        readers.close()
    here = read_batch(topic, payload, Known.of(topic, _known()), 1_000, 1 << 20)
    assert there.rows == here.rows
    assert there.ack == here.ack == Ack("a1", stored=[(1, 3)], vehicle=V1)
    assert Known.of("frota/v1/ZZZ9Z99/up", _known())() == frozenset()
    assert Known.of("not/a/topic", _known())() == frozenset()


_HOLDER = """
import os, sys, time
from collector.readers import BatchReaders
readers = BatchReaders(2)
readers.warm_up()
print(" ".join(map(str, readers._pool._processes)), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (FileNotFoundError, ProcessLookupError):  # gone, or gone between open and read
        return False


def test_readers_end_when_the_collector_is_killed(tmp_path: Path) -> None:
    # a collector killed with SIGKILL (or by the out-of-memory killer) closes nothing: its
    # readers must notice on their own, or they and their forkserver stay for good
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE,
                              cwd=Path(__file__).resolve().parents[2], text=True)
    try:
        assert holder.stdout is not None
        pids = [int(pid) for pid in holder.stdout.readline().split()]
        assert len(pids) == 2
        assert all(map(_alive, pids))
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    deadline = time.monotonic() + 30
    while any(map(_alive, pids)):
        assert time.monotonic() < deadline, f"reader processes {pids} outlived the collector"
        time.sleep(0.05)


#: A payload holding this and a path kills its reader once that path exists (a poison whose
#: moment the test chooses: it waits, so the batches after it are queued in the same pool).
GATED = "poison-gated:"


def _dies_on_gated_poison(topic: str, payload: bytes, known: Known, received_ms: int,
                          max_payload_bytes: int) -> Prepared:
    """_dies_on_poison, and a payload holding GATED + a path kills the reader once the path
    exists."""
    text = payload.decode()
    if GATED in text:
        gate = Path(text.split(GATED, 1)[1].split('"', 1)[0])
        while not gate.exists():
            time.sleep(0.01)
        os._exit(70)
    return _dies_on_poison(topic, payload, known, received_ms, max_payload_bytes)


def test_an_innocent_batch_caught_in_two_poisons_pools_is_read_not_rejected(
        tmp_path: Path) -> None:
    # a batch that was in a pool a poison killed, then in the pool that another poison killed
    # at its second reading: it killed nothing, and must be read, not rejected as the killer
    gate = tmp_path / "gate"
    readers = BatchReaders(1, _dies_on_gated_poison)
    topic = up_topic(V1)
    known = Known.of(topic, _known())
    try:
        first = readers.submit(topic, _payload(V1, "a1", range(1, 3), note=f"{GATED}{gate}"),
                               known, 1_000, 1 << 20)
        innocent = readers.submit(topic, _payload(V1, "a1", range(3, 5)), known, 1_000, 1 << 20)
        gate.touch()  # the first poison kills the pool that holds both
        assert readers.result(first).ack == Ack("a1", rejected=[(1, 2, DIED_READING)],
                                                retryable=[False], vehicle=V1)
        # another poison arrives (paho's thread) before the innocent batch is read again
        second = readers.submit(topic, _payload(V1, "a2", range(1, 2), note=POISON),
                                known, 1_000, 1 << 20)
        read = readers.result(innocent)
        assert read.ack == Ack("a1", stored=[(3, 4)], vehicle=V1)
        assert readers.result(second).ack == Ack("a2", rejected=[(1, 1, DIED_READING)],
                                                 retryable=[False], vehicle=V1)
    finally:
        readers.close()


def _ignored_signals(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        [mask] = [line.split()[1] for line in status if line.startswith("SigIgn:")]
    return int(mask, 16)


def test_readers_leave_sigint_and_sigterm_to_the_collector() -> None:
    # a Ctrl-C on the terminal reaches the whole process group, and systemd's stop sends
    # SIGTERM to every process of the unit: a reader that died of it broke the pool while the
    # collector was still committing its queued batches (all read again, an error logged)
    # collector: the forkserver too, whose end is each of its readers' end to the pool (its
    # pipe of their exit statuses closes)
    readers = BatchReaders(1)  # one: warm_up's batch ran in it, after its start
    try:
        readers.warm_up()
        pids = list(readers._pool._processes)
        assert len(pids) == 1
        server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        assert server is not None
        for pid in [*pids, server]:
            ignored = _ignored_signals(pid)
            assert ignored >> (signal.SIGINT - 1) & 1, f"process {pid} does not ignore SIGINT"
            assert ignored >> (signal.SIGTERM - 1) & 1, f"process {pid} does not ignore SIGTERM"
        for pid in [*pids, server]:  # systemd's stop: SIGTERM to every process of the unit
            os.kill(pid, signal.SIGTERM)
        topic = up_topic(V1)
        read = readers.result(readers.submit(topic, _payload(V1, "a1", range(1, 3)),
                                             Known.of(topic, _known()), 1_000, 1 << 20))
        assert read.ack == Ack("a1", stored=[(1, 2)], vehicle=V1)
        assert readers.restarts == 0
        assert list(readers._pool._processes) == pids
    finally:
        readers.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_collectors_group_stops_it_cleanly(
        tmp_path: Path, mosquitto: Mosquitto, sig: int) -> None:
    # SIGINT: a Ctrl-C on the terminal; SIGTERM: systemd's stop (the collector itself stops)
    config, port = write_collector_files(tmp_path, mosquitto.url, FLEET)
    collector = CollectorProcess(config, port, own_group=True)  # the terminal's group, alone
    collector.start()
    proc = collector.proc
    assert proc is not None
    try:
        os.killpg(proc.pid, sig)
        assert proc.wait(60) == 0  # a bound for the suite, not a measure
    finally:
        collector.child.kill()
    log = collector.log.read_text(encoding="utf-8")
    assert "Traceback" not in log
    assert "reader process died" not in log


def test_a_process_allowed_one_core_reads_in_its_own_thread() -> None:
    # taskset, systemd's CPUAffinity=, docker --cpuset-cpus: the machine has more cores than
    # the collector may run on; one allowed core is a one-core machine to it (no reader)
    one = min(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{one}}}); "
         "from collector.config import default_readers; print(default_readers())"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0"]


@pytest.mark.parametrize("readers", [0, 1])
def test_a_batch_in_flight_when_its_vehicle_is_added_is_not_left_behind_the_replay(
        store: Store, mosquitto: Mosquitto, agent: AgentSide, readers: int) -> None:
    # firmware-notes/mqtt.md: an agent sends its retryable rejects again only when told (the
    # replay notice sent when its vehicle is added). A batch read while the vehicle was unknown
    # and answered after that notice (retryable, unknown) would wait for a notice already gone.
    fleet = set(VEHICLES)
    ingest = Ingest(store, lambda: frozenset(fleet), readers=readers)
    ingest.connect(BrokerConfig(url=mosquitto.url, client_id="registry-race"))
    hold = threading.Event()
    put_many = store.put_many

    def held_put_many(*args: object, **kwargs: object) -> list[int]:
        hold.wait()
        return put_many(*args, **kwargs)  # type: ignore[arg-type]

    try:
        deadline = time.monotonic() + 10
        while not ingest.state.subscribed:
            assert time.monotonic() < deadline, "the collector never connected"
            time.sleep(0.05)
        # the stranger's agent sends before its bus is in the registry: refused, retryable
        agent.publish(STRANGER, _payload(STRANGER, "s1", range(1, 3)), topic=up_topic(STRANGER))
        assert agent.wait_ack(STRANGER).retryable == [True]
        store.put_many = held_put_many  # type: ignore[method-assign]
        agent.publish(V1, _payload(V1, "a1", range(1, 2)))  # the worker waits in its commit
        agent.publish(STRANGER, _payload(STRANGER, "s1", range(3, 5)), topic=up_topic(STRANGER))
        deadline = time.monotonic() + 10
        while ingest._queue.qsize() < 1:  # read (unknown) and queued behind the held commit
            assert time.monotonic() < deadline, "the second batch was never queued"
            time.sleep(0.01)
        fleet.add(STRANGER)  # the registry gains the bus, and its agent is told
        announced = threading.Thread(target=ingest.announce, args=(frozenset({STRANGER}),))
        announced.start()
        # the notice goes out now, or waits for the commit held (a bound, not a measure: the
        # assertions hold either way)
        announced.join(2)
        hold.set()
        announced.join()
        answers = [agent.wait_ack(STRANGER) for _ in range(2)]
    finally:
        hold.set()
        ingest.close()
    # either the batch in flight is stored, or its refusal comes before the replay notice
    in_flight = [a for a in answers if not a.replay]
    assert len(in_flight) == 1
    stored = in_flight[0].stored == [(3, 4)]
    assert stored or answers[0] is in_flight[0], f"refused after the replay notice: {answers}"


def _logs_and_reads(topic: str, payload: bytes, known: Known, received_ms: int,
                    max_payload_bytes: int) -> Prepared:
    """read_batch, after a warning and a debug line of the reader's own."""
    logging.getLogger("tests.reader").warning("read in a reader")
    logging.getLogger("tests.reader").debug("a debug line")
    return read_batch(topic, payload, known, received_ms, max_payload_bytes)


_LOGGING = """
import logging, sys
logging.basicConfig(level=getattr(logging, sys.argv[1]),
                    format="COLLECTOR-FORMAT %(levelname)s %(name)s: %(message)s")
from collector.readers import BatchReaders, Known
from protocols.uplink import encode_batch, up_topic
from tests.collector.test_readers import _logs_and_reads
readers = BatchReaders(1, read=_logs_and_reads)
topic = up_topic("ABC1D23")
readers.result(readers.submit(topic, encode_batch("ABC1D23", "a1", []), Known(frozenset()), 1, 1 << 20))
readers.close()
"""


@pytest.mark.parametrize(("level", "shown"), [("INFO", ["WARNING"]), ("DEBUG", ["WARNING", "DEBUG"]),
                                              ("ERROR", [])])
def test_a_reader_logs_as_the_collector_does(level: str, shown: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _LOGGING, level], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2], timeout=60,
                          check=True)
    lines = [line for line in done.stderr.splitlines() if "tests.reader" in line]
    expected = {"WARNING": "COLLECTOR-FORMAT WARNING tests.reader: read in a reader",
                "DEBUG": "COLLECTOR-FORMAT DEBUG tests.reader: a debug line"}
    assert lines == [expected[what] for what in shown]


#: A payload holding this makes its reader hang (sleep for an hour): a reader stuck on it.
HANG = "hang-forever"
#: A payload holding this and a path hangs its reader the first time (making the path), and is
#: read the second time: a reader stalled once, not by the payload.
HANG_ONCE = "hang-once:"


def _hangs(topic: str, payload: bytes, known: Known, received_ms: int,
           max_payload_bytes: int) -> Prepared:
    """read_batch, but a payload holding HANG never ends, one holding HANG_ONCE + a path hangs
    while that path did not exist."""
    text = payload.decode()
    if HANG in text:
        time.sleep(3600)
    if HANG_ONCE in text:
        mark = Path(text.split(HANG_ONCE, 1)[1].split('"', 1)[0])
        if not mark.exists():
            mark.touch()
            time.sleep(3600)
    return read_batch(topic, payload, known, received_ms, max_payload_bytes)


def test_a_payload_that_hangs_the_reader_is_rejected_after_the_limit_twice(
        store: Store, mosquitto: Mosquitto, agent: AgentSide) -> None:
    """The worker waits for each batch in order: a reader stuck on one would stop the ingest.
    Past ``read_limit_s`` its processes are killed and it is read again alone; stuck again, it
    is rejected whole and final, kept with its reason; the batches around it are stored."""
    ingest = _ingest(store, mosquitto, read=_hangs, read_limit_s=1.5)
    try:
        agent.publish(V1, _payload(V1, "a1", range(1, 3)))
        agent.publish(V1, _payload(V1, "a1", range(3, 5), note=HANG))
        agent.publish(V1, _payload(V1, "a1", range(5, 7)))
        first, stuck, after = (agent.wait_ack(V1, timeout=30) for _ in range(3))
        assert first.stored == [(1, 2)]
        reason = "the batch reader took more than 1.5 s reading it"
        assert (stuck.stored, stuck.rejected, stuck.retryable) == ([], [(3, 4, reason)], [False])
        assert after.stored == [(5, 6)]
        readers = ingest._readers
        assert readers is not None
        assert readers.restarts == 2  # its pool killed, then its lone reader
        # the readers work on
        agent.publish(V1, _payload(V1, "a1", range(7, 9)))
        assert agent.wait_ack(V1).stored == [(7, 8)]
    finally:
        ingest.close()
    assert store.count(V1) == 6
    [(kept_reason, payload)] = store._read("SELECT reason, payload FROM rejects")
    assert kept_reason == reason
    assert HANG.encode() in bytes(payload)


def test_a_reader_stalled_once_reads_the_batch_again(tmp_path: Path) -> None:
    """A batch whose first reading ran past the limit (the reader stalled, not the payload) is
    read again alone and stored; so is the batch queued behind it in the killed pool."""
    readers = BatchReaders(1, _hangs, read_limit_s=1.0)
    topic = up_topic(V1)
    known = Known.of(topic, _known())
    try:
        stalled = readers.submit(topic, _payload(V1, "a1", range(1, 3),
                                                 note=f"{HANG_ONCE}{tmp_path / 'mark'}"),
                                 known, 1_000, 1 << 20)
        behind = readers.submit(topic, _payload(V1, "a1", range(3, 5)), known, 1_000, 1 << 20)
        assert readers.result(stalled).ack == Ack("a1", stored=[(1, 2)], vehicle=V1)
        assert readers.result(behind).ack == Ack("a1", stored=[(3, 4)], vehicle=V1)
        assert readers.restarts == 1
    finally:
        readers.close()


def test_readers_that_cannot_start_leave_the_batches_read_in_the_collector(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The system refuses new processes (fork's EAGAIN, here from the forkserver): the batches
    are read in the collector's process, an error says so, and reader processes are tried
    again after RETRY_START_S."""
    import collector.readers as readers_module

    def refused(*_args: object) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(forkserver, "connect_to_new_process", refused)
    readers = BatchReaders(1)
    topic = up_topic(V1)
    known = Known.of(topic, _known())
    try:
        with caplog.at_level(logging.ERROR, logger="collector.readers"):
            reading = readers.submit(topic, _payload(V1, "a1", range(1, 3)), known, 1, 1 << 20)
        assert reading.future.done()  # read at once, here
        assert readers.result(reading).ack == Ack("a1", stored=[(1, 2)], vehicle=V1)
        assert any("reader processes cannot be started" in r.getMessage()
                   and "Resource temporarily unavailable" in r.getMessage()
                   for r in caplog.records)
        assert readers._pool._processes == {}  # no process: nothing tried until the retry
        monkeypatch.undo()
        reading = readers.submit(topic, _payload(V1, "a1", range(3, 5)), known, 1, 1 << 20)
        assert reading.future.done()  # still within RETRY_START_S: read here
        readers._in_process_until = time.monotonic() - 1  # RETRY_START_S later
        reading = readers.submit(topic, _payload(V1, "a1", range(5, 7)), known, 1, 1 << 20)
        assert readers.result(reading).ack == Ack("a1", stored=[(5, 6)], vehicle=V1)
        assert len(readers._pool._processes) == 1  # in a reader process again
        assert readers_module.RETRY_START_S == 60.0
    finally:
        readers.close()
