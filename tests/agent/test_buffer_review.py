"""Review of the buffer's compact bodies (0008-compact-bodies) and prepared records: records
whose own content looks like the placeholder, whose canonical form differs from their JSON
(escapes, non-ASCII, doubles beyond their precision, offsets), a buffer migrated from 0007 in
the middle of its chain, and the writer killed between the hand-over and the commit.

What is expected comes from the promises (docs/trust.md, firmware-notes/agent.md), never from
the code under review: each body is what building the record whole gives
(:func:`agent.buffer_rows.record_body`), each ``prev`` is the chain hash the *collector*
computes from the JSON it receives (its own intake, ``collector/intake.py``), and a record a
commit acknowledged is there after a SIGKILL."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from agent import schema
from agent.buffer import Buffer
from agent.buffer_rows import PLACEHOLDER, record_body
from agent.writer import BufferWriter
from collector.ingest import Ingest
from collector.intake import prepare as intake
from collector.store import Store
from protocols.chain import GENESIS, record_hash
from protocols.records import Record, make_record, ms_to_ts, ts_to_ms
from protocols.uplink import encode_batch_json, up_topic
from tests.agent.helpers import T0_MS, VEHICLE, speed, wait_until

PAIR = '"prev":"' + PLACEHOLDER + '"'


def _ts(n: int) -> str:
    return ms_to_ts(T0_MS + n * 1000)


def _tricky(n0: int = 0) -> list[Record]:
    """Records whose content plays with the placeholder and with how JSON and the canonical
    form write things differently. Each is a record the collector accepts."""
    text = 'a"b\\c/\n\t\r\b\f\x01\x1f\x7f\u2028\u2029é日本😀'  # U+0000: the collector refuses it
    return [
        make_record("speed", VEHICLE, _ts(n0 + 1), kmh=12.5, note=PLACEHOLDER),
        make_record("speed", VEHICLE, _ts(n0 + 2), kmh=13.0, note=PAIR),  # the pair, as text
        make_record("speed", VEHICLE, _ts(n0 + 3), kmh=14.25, note="," + PAIR + ",",
                    other='{' + PAIR + '}'),
        make_record("speed", VEHICLE, _ts(n0 + 4), kmh=75.93456),  # beyond its 2 places
        make_record("position", VEHICLE, _ts(n0 + 5), lat=-23.550520349, lon=-46.633308,
                    kmh=0.1 + 0.2, course=359.999),
        make_record("speed", VEHICLE, _ts(n0 + 6), kmh=-0.0, tiny=1e-7, small=5e-6, huge=1e21,
                    whole=61.0, big=2**53 - 1, neg=-(2**53 - 1), denormal=5e-324),
        make_record("speed", VEHICLE, _ts(n0 + 7), kmh=1.0, note=text, **{"ключ é": text}),
        make_record("speed", VEHICLE, ms_to_ts(T0_MS + (n0 + 8) * 1000)[:-1] + "+00:00",
                    kmh=2.0),  # an offset: the canonical form writes Z
        make_record("speed", VEHICLE, _ts(n0 + 9), kmh=3.0, nested={"prev": PLACEHOLDER},
                    listed=[PLACEHOLDER, {"seq": 0, "prev": PLACEHOLDER}]),
        make_record("speed", VEHICLE, _ts(n0 + 10), kmh=4.0, **{PAIR: PLACEHOLDER}),
        make_record("speed", VEHICLE, _ts(n0 + 11), kmh=5.0, prevx=PLACEHOLDER, pre=PAIR,
                    device_seq=n0 + 11, raw="aa55"),
    ]


def _whole(recs: list[Record], agent: str, seq: int, prev: str) -> tuple[list[str], str]:
    """The bodies and last hash as the buffer built them before records were prepared."""
    out = []
    for rec in recs:
        body, digest = record_body(rec, agent, seq, prev)
        out.append(body)
        seq, prev = seq + 1, digest.hex()
    return out, prev


def _collector_links(bodies: list[str], agent: str) -> list[tuple[int, str, str | None, str]]:
    """The chain links the collector's intake makes of ``bodies`` sent as one batch."""
    prepared = intake(up_topic(VEHICLE), encode_batch_json(VEHICLE, agent, bodies),
                      lambda: frozenset({VEHICLE}), T0_MS)
    assert prepared.rejects == [], [r.reason for r in prepared.rejects]
    assert prepared.chain is not None
    return list(prepared.chain.links)


def _assert_chain(bodies: list[str], agent: str, first_prev: str) -> None:
    """Each record's prev is the hash the collector computes of the record before it."""
    links = _collector_links(bodies, agent)
    assert [link[0] for link in links] == [orjson.loads(b)["seq"] for b in bodies]
    assert links[0][2] == first_prev
    for before, after in itertools.pairwise(links):
        assert after[2] == before[1], f"chain broken at seq {after[0]}"
    for body, link in zip(bodies, links, strict=True):
        assert record_hash(orjson.loads(body)) == link[1]


def _view(buf: Buffer) -> dict[int, str]:
    return dict(buf.conn.execute("SELECT seq, body FROM record_bodies"))


def test_records_that_hold_the_placeholder_or_write_differently_chain_as_built_whole(
    tmp_path: Path,
) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    recs = _tricky()
    seqs = buf.add([("gps", r) for r in recs[:4]])
    seqs += buf.add([("gps", r) for r in recs[4:]])  # the chain across two commits
    assert seqs == list(range(1, len(recs) + 1))
    expected, last = _whole(recs, buf.agent, 1, GENESIS)
    bodies = [b for _, b in buf.pending(0, 100)]
    assert bodies == expected  # byte for byte
    assert _view(buf) == dict(enumerate(expected, start=1))
    _assert_chain(bodies, buf.agent, GENESIS)
    assert buf.hashes(seqs) == {s: record_hash(orjson.loads(b)) for s, b in zip(
        seqs, bodies, strict=True)}
    assert buf.conn.execute("SELECT value FROM meta WHERE key = 'last_hash'").fetchone()[0] \
        == last
    buf.close()


def test_a_record_holding_the_placeholder_pair_in_each_place_is_hashed_as_sent(
    tmp_path: Path,
) -> None:
    """One record at a time, each after a real prev (not GENESIS: a replacement that hit the
    wrong bytes would still look right when prev and placeholder were alike)."""
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("gps", speed(1))])
    for rec in _tricky(10):
        [(_, before)] = buf.bodies(buf.last_seq(), buf.last_seq())
        [seq] = buf.add([("gps", rec)])
        [(_, body)] = buf.bodies(seq, seq)
        assert orjson.loads(body)["prev"] == record_hash(orjson.loads(before))
        assert body == record_body(rec, buf.agent, seq, record_hash(orjson.loads(before)))[0]
        assert buf.hashes([seq]) == {seq: record_hash(orjson.loads(body))}
    buf.close()


def test_odd_vehicles_are_spliced_back_alike_by_python_and_by_the_view(tmp_path: Path) -> None:
    """The view and sent_body find ``kind`` by the first ',"kind":' in the body: a vehicle
    holding that text, quotes, backslashes or characters beyond ASCII must not move it."""
    buf = Buffer(tmp_path / "b.sqlite")
    vehicles = ['V,"kind":"speed"', 'Ô"\\', "日本😀,\"kind\":", "\x00,\"kind\":\"x\""]
    recs = [make_record("speed", v, _ts(n), kmh=1.0, note=',"kind":"speed"')
            for n, v in enumerate(vehicles)]
    seqs = buf.add([("gps", r) for r in recs])
    expected, _ = _whole(recs, buf.agent, 1, GENESIS)
    assert [b for _, b in buf.pending(0, 100)] == expected
    assert _view(buf) == dict(zip(seqs, expected, strict=True))
    buf.close()


def _old_buffer(path: Path, monkeypatch: pytest.MonkeyPatch, recs: list[Record]) -> str:
    """A buffer of 0007 holding ``recs`` as it wrote them (whole bodies, each hash in its row),
    the first three stored; its last hash."""
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:7])
    assert schema.MIGRATIONS[-1][0] == "0007-stored-ranges"
    buf = Buffer(path)
    prev = GENESIS
    for seq, rec in enumerate(recs, start=1):
        body, digest = record_body(rec, buf.agent, seq, prev)
        buf.conn.execute(
            "INSERT INTO records (seq, ts_ms, kind, source, device_seq, body, captured_ms, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, ts_to_ms(rec["ts"]), rec["kind"], "gps", rec.get("device_seq"), body, 1,
             digest))
        prev = digest.hex()
    buf.conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_seq', ?)", (str(len(recs)),))
    buf.conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_hash', ?)", (prev,))
    assert buf.mark([(1, 3)], []) == 3
    buf.close()
    monkeypatch.undo()
    return prev


def test_a_buffer_migrated_mid_chain_then_appended_drains_into_one_unbroken_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Store,
) -> None:
    """Old rows (0007), then new compact ones after the migration, drained in batches that
    straddle the boundary into a real store: all stored, no conflict, no chain break; the
    buffer's hashes (for the checkpoints) those the collector computed; and once the newest old
    row's successor is evicted, its hash is still the collector's."""
    path = tmp_path / "b.sqlite"
    old = _tricky(0)
    _old_buffer(path, monkeypatch, old)
    buf = Buffer(path)
    new = _tricky(100)
    assert buf.add([("gps", r) for r in new]) == list(range(len(old) + 1, 2 * len(old) + 1))
    rows = buf.pending(0, 1000)
    assert [s for s, _ in rows] == list(range(4, 2 * len(old) + 1))  # 1-3 stored before
    bodies = [b for _, b in buf.bodies(1, 2 * len(old))]
    expected, _ = _whole(old + new, buf.agent, 1, GENESIS)
    assert bodies == expected
    _assert_chain(bodies, buf.agent, GENESIS)
    links = {link[0]: link[1] for link in _collector_links(bodies, buf.agent)}
    assert buf.hashes(links) == links
    # drained in batches of 5 (the boundary, 11 | 12, inside one) into a collector
    ingest = Ingest(store, lambda: frozenset({VEHICLE}))
    for i in range(0, len(bodies), 5):
        part = bodies[i : i + 5]
        prepared = intake(up_topic(VEHICLE), encode_batch_json(VEHICLE, buf.agent, part),
                          lambda: frozenset({VEHICLE}), T0_MS)
        [answer] = ingest._commit_many([prepared])
        assert answer is not None
        ack = answer[1]
        seqs = [orjson.loads(b)["seq"] for b in part]
        assert ack.stored == [(seqs[0], seqs[-1])]
        assert ack.conflicts == []
        assert ack.rejected == []
        buf.mark(ack.stored, [])
    assert store.count() == len(bodies)
    assert store._read("SELECT count(*) FROM integrity") == [(0,)]
    assert store._read("SELECT count(*) FROM conflicts") == [(0,)]
    # the first new row (12) evicted: 11 (old) keeps its own hash, 13's prev is 12's
    buf.conn.execute("DELETE FROM records WHERE seq = 12")
    assert buf.hashes([11, 13]) == {11: links[11], 13: links[13]}
    buf.conn.execute("DELETE FROM records WHERE seq = 14")  # 13 (compact): hashed from its body
    assert buf.hashes([13]) == {13: links[13]}
    buf.close()


_WRITER = """
import sys
import threading
from agent.writer import BufferWriter
from tests.agent.test_buffer_review import _tricky

writer = BufferWriter(sys.argv[1], commit_records=7, commit_interval_ms=5)
committed = threading.Event()
writer.notify(committed)
writer.start()
n = int(sys.argv[2])
while True:
    committed.clear()
    recs = _tricky(n)
    writer.put_many("gps", recs[:5])
    writer.put_many("gps", recs[5:])
    n += 20
    committed.wait()
    # every record handed over before the commit that set the event may be in it; those
    # counted here are committed: the promise is that they survive
    print(writer.captured, flush=True)
"""


def test_records_a_commit_acknowledged_survive_sigkill_and_the_chain_goes_on(
    tmp_path: Path,
) -> None:
    """The writer killed (SIGKILL) while records are being handed over, prepared and
    committed: every record a commit acknowledged is there, the seqs have no gap, the chain is
    whole through every restart, and the next start chains on from the last record kept."""
    path = tmp_path / "b.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    acknowledged = 0
    for run, lines in enumerate((3, 11, 1, 25, 7)):
        before = Buffer(path)
        kept = before.last_seq()
        before.close()
        proc = subprocess.Popen([sys.executable, str(script), str(path), str(10_000 * run)],
                                stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        last = 0
        for _ in range(lines):
            line = proc.stdout.readline()
            assert line, "the writer stopped"
            last = int(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        acknowledged = kept + last
        buf = Buffer(path)
        assert buf.last_seq() >= acknowledged
        bodies = [b for _, b in buf.bodies(1, buf.last_seq())]
        assert [orjson.loads(b)["seq"] for b in bodies] == list(range(1, buf.last_seq() + 1))
        _assert_chain(bodies, buf.agent, GENESIS)
        last_hash = buf.conn.execute(
            "SELECT value FROM meta WHERE key = 'last_hash'").fetchone()[0]
        assert last_hash == record_hash(orjson.loads(bodies[-1]))
        buf.close()
    assert acknowledged > 0


def test_tricky_records_are_accepted_by_the_collector_as_they_are() -> None:
    """The records above are valid for the collector (else the chain checks would prove
    nothing): sent as plain JSON, none is rejected."""
    recs = [{**r, "agent": "x", "seq": n, "prev": GENESIS} for n, r in enumerate(_tricky(), 1)]
    bodies = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in recs]
    links = _collector_links(bodies, "x")
    assert len(links) == len(recs)


def test_a_commit_that_fails_keeps_its_groups_ahead_of_those_queued_meanwhile(
    tmp_path: Path,
) -> None:
    """A commit refused for another reason than a full disk (the database locked longer than
    the busy timeout: ``frota agent replay`` or an export holding it) keeps its groups in memory
    and commits them again: before the groups a source handed over meanwhile, so that a
    source's records keep their order and the state saved last is the newest (the door
    counters' baselines: an older one saved over a newer one counts passengers twice after a
    restart). They were queued again behind them."""
    path = tmp_path / "b.sqlite"
    writer = BufferWriter(path, commit_records=1, commit_interval_ms=1)
    # the wait for the lock shortened from 30 s (the commit fails sooner; nothing is timed)
    writer.buffer.conn.execute("PRAGMA busy_timeout = 1500")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # holds the write lock
    writer.start()
    first, second = speed(1), speed(2)
    writer.put_many("apc", [first], state='{"baseline": 1}')
    assert wait_until(lambda: not writer._queue)  # taken: its commit waits for the lock
    writer.put_many("apc", [second], state='{"baseline": 2}')  # queued while it waits
    assert wait_until(lambda: writer.error is not None, timeout=60)  # that commit failed
    blocker.execute("ROLLBACK")
    blocker.close()
    writer.stop()
    buf = Buffer(path)
    bodies = [orjson.loads(b) for _, b in buf.bodies(1, 10)]
    assert [b["ts"] for b in bodies] == [first["ts"], second["ts"]]
    assert buf.source_state("apc") == '{"baseline": 2}'
    buf.close()


def test_a_commit_between_the_reads_of_hashes_does_not_change_its_answer(tmp_path: Path) -> None:
    """A record's chain hash is the next record's prev, or, for the newest, the last hash given
    (``meta``). The uplink asks for the newest (a live batch's checkpoint, an ack's binding)
    while the writer commits: a commit landing before any one of the statements
    :meth:`Buffer.hashes` runs must not change its answer. (Read as two statements, the last
    seq and the last hash could come from either side of a commit: seq 2 answered with the
    hash of seq 3.)"""
    for at in itertools.count(1):
        folder = tmp_path / str(at)
        folder.mkdir()
        writer = Buffer(folder / "b.sqlite")
        writer.add([("gps", speed(1)), ("gps", speed(2))])
        want = {s: record_hash(orjson.loads(b)) for s, b in writer.bodies(1, 2)}
        reader = Buffer(folder / "b.sqlite")
        seen = 0

        def trace(_: str, at: int = at, writer: Buffer = writer) -> None:
            nonlocal seen
            seen += 1
            if seen == at:  # before this statement reads anything: another commit
                writer.add([("gps", speed(3 + at))])

        reader.conn.set_trace_callback(trace)
        got = reader.hashes([1, 2])
        reader.conn.set_trace_callback(None)
        reader.close()
        writer.close()
        assert got == want, f"a commit before statement {at}"
        if seen < at:  # every statement had a commit before it
            break


def test_a_record_deleted_between_the_reads_of_hashes_is_left_out_not_an_error(
    tmp_path: Path,
) -> None:
    """A stored record the writer deletes (retention, eviction) while :meth:`Buffer.hashes`
    reads: answered with its hash or left out ("the records the buffer still holds"), never
    an exception in the uplink's thread."""
    for at in itertools.count(1):
        folder = tmp_path / str(at)
        folder.mkdir()
        writer = Buffer(folder / "b.sqlite")
        writer.add([("gps", speed(n)) for n in range(1, 4)])
        want = {s: record_hash(orjson.loads(b)) for s, b in writer.bodies(1, 3)}
        writer.mark([(1, 2)], [])
        writer.conn.execute("DELETE FROM records WHERE seq = 2")  # evicted: 1 hashed from its body
        reader = Buffer(folder / "b.sqlite")
        seen = 0

        def trace(_: str, at: int = at, writer: Buffer = writer) -> None:
            nonlocal seen
            seen += 1
            if seen == at:
                writer.conn.execute("DELETE FROM records WHERE seq = 1")

        reader.conn.set_trace_callback(trace)
        got = reader.hashes([1])
        reader.conn.set_trace_callback(None)
        reader.close()
        writer.close()
        assert got in ({}, {1: want[1]}), f"a deletion before statement {at}"
        if seen < at:
            break


def test_sources_handing_over_at_once_lose_nothing_and_keep_their_order(tmp_path: Path) -> None:
    """Four sources' threads hand groups over (the deque, no lock) while the writer commits:
    after stop every record is captured once, each source's in the order it gave them, and
    the chain runs through all of them."""
    path = tmp_path / "b.sqlite"
    writer = BufferWriter(path, commit_records=37, commit_interval_ms=1)
    writer.start()
    per_source = 300

    def source(name: str, offset: int) -> None:
        for n in range(0, per_source, 3):
            writer.put_many(name, [make_record("speed", VEHICLE, _ts(offset + n + k),
                                               kmh=float(k), src=name, n=n + k)
                                   for k in range(3)])

    with ThreadPoolExecutor(4) as pool:
        for done in [pool.submit(source, f"s{i}", 10_000 * i) for i in range(4)]:
            done.result()
    writer.stop()
    buf = Buffer(path)
    bodies = [b for _, b in buf.bodies(1, buf.last_seq())]
    assert len(bodies) == 4 * per_source
    by_source: dict[str, list[int]] = {}
    for body in bodies:
        rec = orjson.loads(body)
        by_source.setdefault(rec["src"], []).append(rec["n"])
    assert by_source == {f"s{i}": list(range(per_source)) for i in range(4)}
    for i in range(0, len(bodies), 200):  # the collector's hashes, batch by batch
        _assert_chain(bodies[i : i + 200], buf.agent,
                      GENESIS if i == 0 else orjson.loads(bodies[i])["prev"])
    assert orjson.loads(bodies[0])["prev"] == GENESIS
    for before, after in itertools.pairwise(bodies):
        assert orjson.loads(after)["prev"] == record_hash(orjson.loads(before))
    buf.close()


def test_a_record_with_no_canonical_form_is_dropped_and_the_writer_lives_on(tmp_path: Path) -> None:
    """A source handing over a record nothing can chain — an integer beyond 64 bits (orjson
    refuses it with a TypeError), NaN (RFC 8785 has no form for it), an object that is no JSON —
    loses that record alone: the records beside it and after it are captured, the writer's
    thread lives on (it died on the first, and with it every record after)."""
    writer = BufferWriter(tmp_path / "buffer.sqlite")
    writer.start()
    try:
        for n, bad_value in enumerate((2**70, float("nan"), object())):
            bad = speed(10 * n + 1, device_seq=10 * n + 1)
            bad["odometer_m"] = bad_value
            writer.put_many("reg", [bad, speed(10 * n + 2, device_seq=10 * n + 2)])
        writer.put_many("reg", [speed(99, device_seq=99)])
        deadline = time.monotonic() + 20
        while writer.captured < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert writer.alive
        assert writer.captured == 4            # 2, 12, 22 and 99; 1, 11 and 21 dropped
    finally:
        writer.stop()
    buf = Buffer(tmp_path / "buffer.sqlite")
    bodies = [json.loads(body) for _, body in buf.pending(0, 10)]
    assert [b["device_seq"] for b in bodies] == [2, 12, 22, 99]
    assert [b["seq"] for b in bodies] == [1, 2, 3, 4]
    assert bodies[0]["prev"] == GENESIS
    assert all(b["prev"] == record_hash(a) for a, b in itertools.pairwise(bodies))
    buf.close()


def test_a_commit_that_raises_something_unforeseen_drops_its_batch_not_the_writer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last resort: whatever a commit raises, the batch is dropped (counted, logged) and the
    records after it are captured."""
    writer = BufferWriter(tmp_path / "buffer.sqlite")
    real = writer.buffer.add_ready
    calls = []

    def add_ready_failing_once(*args: object, **kwargs: object) -> list[int]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("unforeseen")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer.buffer, "add_ready", add_ready_failing_once)
    writer.start()
    try:
        writer.put_many("reg", [speed(1, device_seq=1)])
        assert wait_until(lambda: writer.dropped == 1)
        writer.put_many("reg", [speed(2, device_seq=2)])
        assert wait_until(lambda: writer.captured == 1)
        assert writer.alive
    finally:
        writer.stop()
