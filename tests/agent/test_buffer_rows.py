"""The buffer's rows built from prepared records (the JSON and canonical form made before the
seq is known, the holes filled in the commit) are byte for byte the rows built whole."""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent import schema
from agent.buffer import Buffer
from agent.buffer_rows import (
    PLACEHOLDER,
    agent_json,
    build_rows,
    insert_rows,
    prepare,
    record_body,
    sent_body,
)
from agent.schema import migrate
from protocols.canonical import canonical
from protocols.chain import GENESIS, record_hash
from protocols.records import Record, RecordError, ts_to_ms
from tests.agent.helpers import VEHICLE, speed

AGENT = "6f1c0d8e-3b55-4a1e-9a43-0c2f3f7e9b10"

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-1e7, max_value=1e7)
    | st.text(max_size=12)
)
_values = _scalars | st.lists(_scalars, max_size=3) | st.dictionaries(
    st.sampled_from(["seq", "prev", "a", "kmh"]), _scalars, max_size=3)
_keys = st.text(max_size=8) | st.sampled_from(
    ["kmh", "lat", "lon", "course", "raw", "slot", "agent", "seq", "prev", "é"])


def _stored(
    items: list[tuple[str, Record]], seq: int, prev: str
) -> tuple[list[tuple[int, str, str]], str]:
    """Capture ``items`` into a buffer's schema (in memory) from ``seq`` after ``prev``: each
    record's (seq, body as sent by sent_body, body as the view record_bodies gives it), and the
    chain hash of the last."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    conn.execute("INSERT INTO meta VALUES ('agent', ?)", (AGENT,))
    rows, last = build_rows(conn, AGENT, [(s, prepare(r, AGENT)) for s, r in items], seq, prev, 0)
    insert_rows(conn, rows, 0)
    view = dict(conn.execute("SELECT seq, body FROM record_bodies").fetchall())
    stored = conn.execute("SELECT seq, kind, body, prev FROM records ORDER BY seq").fetchall()
    assert [s for s, *_ in stored] == [row[0] for row in rows]
    out = [(s, sent_body(s, kind, body, prev, agent_json(AGENT)), view[s])
           for s, kind, body, prev in stored]
    conn.close()
    return out, last


def _expected(recs: list[Record], seq: int, prev: str) -> tuple[list[tuple[int, str, str]], str]:
    """The rows as they were built before records were prepared: record by record, whole."""
    out = []
    for rec in recs:
        try:
            body, digest = record_body(rec, AGENT, seq, prev)
        except RecordError:  # no canonical form: dropped, takes no seq
            continue
        out.append((seq, body, body))
        seq, prev = seq + 1, digest.hex()
    return out, prev


_record_fields = st.tuples(
    st.dictionaries(_keys, _values, max_size=8),
    st.sampled_from(["speed", "position", "driver", "door", "device", "x-y", 'q"']),
    st.sampled_from(["2026-03-02T14:00:01.000Z", "2026-03-02T11:00:01.5-03:00"]))


@settings(max_examples=400, deadline=None)
@given(st.lists(_record_fields, min_size=1, max_size=4),
       st.integers(min_value=1, max_value=2**53 + 2))
@example([({}, "speed", "2026-03-02T14:00:01.000Z")], 1)
@example([({"kmh": 61.0, "odometer_m": 22, "device_seq": 4, "raw": "aa55"}, "speed",
           "2026-03-02T14:00:01.000Z")] * 1 + [({"kmh": 0.5}, "speed", "2026-03-02T14:00:02.000Z")],
         2**53 - 1)
@example([({"lat": -23.5, "lon": -46.6252, "kmh": 75.93, "course": 1.0}, "position",
           "2026-03-02T14:00:01.000Z")], 10**6)
@example([({"a": {"prev": PLACEHOLDER, "seq": 0}}, "speed", "2026-03-02T14:00:01.000Z"),
          ({"kmh": 1.0}, "speed", "2026-03-02T14:00:01.000Z")], 7)
@example([({"seq": 3, "agent": "someone", "prev": "x"}, "speed", "2026-03-02T14:00:01.000Z")], 7)
@example([({'a"prev': PLACEHOLDER, "kmh": 1.0}, "speed", "2026-03-02T14:00:01.000Z"),
          ({"kmh": 2.0}, "speed", "2026-03-02T14:00:02.000Z")], 7)
def test_prepared_records_are_the_records_built_whole(
    fields: list[tuple[dict[str, Any], str, str]], seq: int
) -> None:
    """One commit of records of every shape (flat or nested, odd kinds and fields, a seq
    crossing 2**53 - 1) gives the bodies and chain that building each record whole gave."""
    recs: list[Record] = [
        {"vehicle": VEHICLE, "ts": ts, "kind": kind,
         **{k: v for k, v in extra.items() if k not in ("vehicle", "ts", "kind")}}
        for extra, kind, ts in fields]
    prev = hashlib.sha256(str(seq).encode()).hexdigest()
    assert _stored([("gps", rec) for rec in recs], seq, prev) == _expected(recs, seq, prev)


def test_the_chain_runs_through_a_commit(tmp_path: Path) -> None:
    """Each record's prev is the hash (record_hash, the collector's) of the one before it."""
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("reg", speed(n, device_seq=n)) for n in range(5)])
    buf.add([("reg", speed(n)) for n in range(5, 8)])
    bodies = [orjson.loads(b) for _, b in buf.pending(0, 100)]
    assert [b["seq"] for b in bodies] == list(range(1, 9))
    assert bodies[0]["prev"] == GENESIS
    for before, rec in itertools.pairwise(bodies):
        assert rec["prev"] == record_hash(before)
    assert buf.hashes([8]) == {8: record_hash(bodies[-1])}
    assert hashlib.sha256(canonical(bodies[-1])).hexdigest() == record_hash(bodies[-1])
    buf.close()


def test_which_records_are_stored_compact() -> None:
    """Records with plain vehicle, ts and kind are stored compact (prev in its column); the
    others whole, as before 0008, and so is one holding the placeholder's pair itself."""
    position: Record = {"vehicle": VEHICLE, "ts": "2026-03-02T14:00:01.000Z", "kind": "position",
                        "lat": -23.5, "lon": -46.6252, "kmh": 75.93, "course": 1.0, "raw": "24"}
    nested: Record = {**position, "extra": {"seq": 0, "prev": "x"}}
    placeholder_inside: Record = {**position, "extra": {"prev": PLACEHOLDER}}
    own_seq: Record = {**position, "seq": 3}
    odd_kind: Record = {**position, "kind": 'q"'}
    recs = [speed(1, device_seq=1), position, nested, placeholder_inside, own_seq, odd_kind]
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    rows, _ = build_rows(conn, AGENT, [("gps", prepare(r, AGENT)) for r in recs], 1, GENESIS, 0)
    insert_rows(conn, rows, 0)
    compact = (1, 1)
    whole = (0, 0)
    assert conn.execute("SELECT hash IS NULL, prev IS NOT NULL FROM records ORDER BY seq"
                        ).fetchall() == [compact, compact, compact, whole, whole, whole]
    conn.close()


def test_a_buffer_from_before_0008_keeps_every_record_and_chains_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A buffer of 0007 (whole bodies, each hash in its row) migrates to 0008 without a record
    lost or changed: the same bodies sent, the same hashes, the chain going on from its last."""
    path = tmp_path / "b.sqlite"
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:7])
    assert schema.MIGRATIONS[-1][0] == "0007-stored-ranges"
    buf = Buffer(path)
    agent = buf.agent
    old: dict[int, tuple[str, bytes]] = {}
    prev = GENESIS
    for seq in range(1, 11):  # rows as the buffer wrote them before 0008
        rec = speed(seq, device_seq=seq if seq <= 5 else None)
        body, digest = record_body(rec, agent, seq, prev)
        buf.conn.execute(
            "INSERT INTO records (seq, ts_ms, kind, source, device_seq, body, captured_ms, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, ts_to_ms(rec["ts"]), rec["kind"], "reg", rec.get("device_seq"), body, 1, digest))
        old[seq] = (body, digest)
        prev = digest.hex()
    buf.conn.execute("INSERT INTO captured_frames VALUES ('reg', 1, 5, ?, ?)",
                     (ts_to_ms(speed(1)["ts"]), ts_to_ms(speed(5)["ts"])))
    buf.conn.execute("UPDATE meta SET value = '10' WHERE key = 'last_seq'")
    buf.conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_hash', ?)", (prev,))
    assert buf.mark([(1, 3)], [(4, 4, "bad")], [], [True]) == 4
    buf.close()
    monkeypatch.undo()

    buf = Buffer(path)
    assert buf.agent == agent
    names = [n for (n,) in buf.conn.execute("SELECT name FROM migrations ORDER BY name")]
    assert names[-2:] == ["0008-compact-bodies", "0009-no-frame-index"]
    counts = buf.counts()
    assert (counts.pending, counts.stored, counts.rejected, counts.last_seq) == (6, 3, 1, 10)
    assert buf.pending(0, 100) == [(s, old[s][0]) for s in range(5, 11)]
    assert buf.bodies(1, 10) == [(s, old[s][0]) for s in range(1, 11)]
    assert dict(buf.conn.execute("SELECT seq, body FROM record_bodies")) == {
        s: b for s, (b, _) in old.items()}
    assert buf.hashes(range(1, 11)) == {s: d.hex() for s, (_, d) in old.items()}
    # The chain goes on from the last record of before; new rows are compact.
    assert buf.add([("reg", speed(n, device_seq=n)) for n in range(11, 14)]) == [11, 12, 13]
    bodies = [orjson.loads(b) for _, b in buf.bodies(10, 13)]
    assert bodies[1]["prev"] == old[10][1].hex()
    for before, rec in itertools.pairwise(bodies):
        assert rec["prev"] == record_hash(before)
    assert buf.hashes([10, 11, 12, 13]) == {
        s: record_hash(b) for s, b in zip(range(10, 14), bodies, strict=True)}
    (whole,) = buf.conn.execute("SELECT COUNT(*) FROM records WHERE seq > 10 AND (prev IS NULL "
                                "OR hash IS NOT NULL OR body LIKE '%\"prev\"%')").fetchone()
    assert whole == 0
    # A frame captured before the migration is still known.
    assert buf.add([("reg", speed(3, device_seq=3))]) == []
    buf.close()


def test_a_frame_twice_in_one_commit_is_captured_once(tmp_path: Path) -> None:
    """A frame that arrives again later in the same commit (asked again while its first copy
    was still queued) is one record, as across commits."""
    buf = Buffer(tmp_path / "b.sqlite")
    frame5, frame6 = speed(1, device_seq=5), speed(2, device_seq=6)
    assert buf.add([("reg", frame5), ("reg", frame6), ("gps", speed(3)), ("reg", frame5),
                    ("reg", speed(4, device_seq=7)), ("reg", frame6)]) == [1, 2, 3, 4]
    assert [orjson.loads(b).get("device_seq") for _, b in buf.pending(0, 10)] == [5, 6, None, 7]
    buf.close()


def test_a_buffer_of_0008_loses_only_its_frame_number_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0009-no-frame-index drops ``records_device_seq`` and nothing else: the records of a buffer
    of 0008 are read as before, the registrador's last frame number (its catch-up start) is the
    one of its newest numbered record, and a frame captured before is still known."""
    path = tmp_path / "b.sqlite"
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:8])
    assert schema.MIGRATIONS[-1][0] == "0008-compact-bodies"
    buf = Buffer(path)
    # frames 7, 3 (a history download after a live one), then a GPS record without a number
    assert buf.add([("reg", speed(1, device_seq=7)), ("reg", speed(2, device_seq=3)),
                    ("gps", speed(3))]) == [1, 2, 3]
    before = buf.bodies(1, 3)
    hashes = buf.hashes([1, 2, 3])
    buf.close()
    monkeypatch.undo()

    buf = Buffer(path)
    indexes = {n for (n,) in buf.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records'")}
    assert "records_device_seq" not in indexes
    assert {"records_ts", "records_device_kind", "records_answered"} <= indexes
    assert buf.bodies(1, 3) == before
    assert buf.hashes([1, 2, 3]) == hashes
    assert buf.last_device_seq("reg") == 3  # the newest captured (seq 2), not the highest
    assert buf.last_device_seq("gps") is None
    assert buf.add([("reg", speed(2, device_seq=3)), ("reg", speed(4, device_seq=8))]) == [4]
    assert buf.last_device_seq("reg") == 8
    buf.close()


def test_a_compact_commit_stores_the_commit_time_and_no_hash_in_every_row() -> None:
    """The usual commit's rows are bound without their captured_ms and hash (one ?1 and a NULL
    in the SQL): every row holds the commit's time, no hash, its own prev — in statements of
    every size (250 rows: one of 200, then 32, 16, 2)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    recs = [speed(n, device_seq=n) for n in range(1, 251)]
    rows, last = build_rows(conn, AGENT, [("reg", prepare(r, AGENT)) for r in recs], 1, GENESIS,
                            1_234)
    insert_rows(conn, rows, 1_234)
    got = conn.execute("SELECT seq, source, device_seq, captured_ms, hash, prev FROM records "
                       "ORDER BY seq").fetchall()
    assert [(s, src, d, c, h) for s, src, d, c, h, _ in got] == [
        (n, "reg", n, 1_234, None) for n in range(1, 251)]
    # each prev is the SHA-256 of the record before as sent (rfc8785 as the oracle)
    sent = [orjson.loads(sent_body(s, "speed", b, p, agent_json(AGENT))) for s, b, p in
            conn.execute("SELECT seq, body, prev FROM records ORDER BY seq")]
    hashes = [hashlib.sha256(rfc8785.dumps(r)).hexdigest() for r in sent]
    assert [r["prev"] for r in sent] == [GENESIS, *hashes[:-1]]
    assert last == hashes[-1]
    conn.close()


def test_a_record_whose_time_is_not_canonical_is_stored_whole_and_sent_alike() -> None:
    """A ``ts`` with another offset or fraction is split no more (the commit's forms take every
    split record's ``ts`` as canonical): its row is whole (its JSON as sent, its hash), the
    record sent is the one built whole, and the chain's hash is the SHA-256 of its canonical
    form — rfc8785 over the record with its time in UTC milliseconds."""
    other = {**speed(1, device_seq=1), "ts": "2026-03-02T11:00:01.5-03:00"}
    recs = [speed(2, device_seq=2), other, speed(3, device_seq=3)]
    assert prepare(other, AGENT)[3] is None  # not split
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    rows, last = build_rows(conn, AGENT, [("reg", prepare(r, AGENT)) for r in recs], 1, GENESIS,
                            0)
    insert_rows(conn, rows, 0)
    stored = conn.execute("SELECT seq, kind, body, prev, hash FROM records ORDER BY seq"
                          ).fetchall()
    assert [(p is None, h is None) for *_, p, h in stored] == [
        (False, True), (True, False), (False, True)]
    sent = [sent_body(s, k, b, p, agent_json(AGENT)) for s, k, b, p, _ in stored]
    prev = GENESIS
    for n, (rec, body) in enumerate(zip(recs, sent, strict=True), start=1):
        assert body == record_body(rec, AGENT, n, prev)[0]
        as_sent = orjson.loads(body)
        assert as_sent["ts"] == rec["ts"]  # sent as given
        as_sent["ts"] = "2026-03-02T14:00:01.500Z" if rec is other else as_sent["ts"]
        prev = hashlib.sha256(rfc8785.dumps(as_sent)).hexdigest()
    assert stored[1][4] == bytes.fromhex(orjson.loads(sent[2])["prev"])
    assert last == prev
    conn.close()
