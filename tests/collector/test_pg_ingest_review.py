"""Review of the PostgreSQL ingest by COPY (a group's records in ONE binary COPY under a
savepoint; when a unique key refuses it, the temporary stage and ONE ``INSERT … SELECT … ON
CONFLICT DO NOTHING``): what a group commit answers must not depend on the backend nor on which
road the records took. Expected values are the promises of docs/collector.md and docs/trust.md:
a resend is acknowledged as stored once, a record that differs from the one stored under its
identity is a conflict (both kept, the first unchanged, an ``integrity`` row), one bad batch
never takes the others down, ``id`` follows arrival."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from collector.ingest import Ingest
from collector.intake import Prepared, prepare
from collector.store import INSERT_RECORD, Store, StoreError, open_store, record_row
from frota.harness.postgres import private_schema
from protocols.records import Record
from protocols.uplink import Ack, encode_batch
from tests.collector.helpers import T0, VEHICLES, speed

V1, V2 = VEHICLES


def _known() -> frozenset[str]:
    return frozenset(VEHICLES)


def _batch(vehicle: str, agent: str, records: list[Record]) -> Prepared:
    return prepare(f"frota/v1/{vehicle}/up", encode_batch(vehicle, agent, records), _known, T0)


def _speeds(vehicle: str, agent: str, seqs: range, **extra: Any) -> Prepared:
    return _batch(vehicle, agent, [speed(vehicle, agent, n, **extra) for n in seqs])


def _acks(answers: list[tuple[str, Ack] | None]) -> list[tuple[Any, ...]]:
    """What each answer tells its agent: (vehicle, stored, conflicts, rejected seqs)."""
    out: list[tuple[Any, ...]] = []
    for answer in answers:
        assert answer is not None
        vehicle, ack = answer
        out.append((vehicle, ack.stored, ack.conflicts, [(a, b) for a, b, _ in ack.rejected]))
    return out


def _stored(store: Store) -> list[tuple[str, str, int, dict[str, Any]]]:
    """Every stored record in ``id`` order: (vehicle, agent, seq, record without seq)."""
    out = []
    for _, text in store.records_after(0, limit=10_000):
        rec = json.loads(text)
        out.append((rec["vehicle"], rec["agent"], rec["seq"], rec))
    return out


def test_a_resend_a_conflict_and_new_records_in_one_group(store: Store) -> None:
    ingest = Ingest(store, _known)
    assert _acks(ingest._commit_many([_speeds(V1, "a1", range(1, 4))])) == [
        (V1, [(1, 3)], [], [])]
    first = {seq: rec for _, _, seq, rec in _stored(store)}
    group = [
        _speeds(V1, "a1", range(1, 4)),  # resent as it was: stored once, answered stored
        _speeds(V1, "a1", range(3, 5), note="other"),  # 3 differs from the stored 3; 4 new
        _speeds(V2, "b1", range(1, 3)),  # new
        _speeds(V1, "a1", range(5, 7)),  # new
    ]
    assert _acks(ingest._commit_many(group)) == [
        (V1, [(1, 3)], [], []),
        (V1, [(4, 4)], [3], []),
        (V2, [(1, 2)], [], []),
        (V1, [(5, 6)], [], []),
    ]
    rows = _stored(store)
    # ids in arrival order: the first commit's, then the group's new ones in the group's order
    assert [(v, a, s) for v, a, s, _ in rows] == [
        (V1, "a1", 1), (V1, "a1", 2), (V1, "a1", 3), (V1, "a1", 4), (V2, "b1", 1), (V2, "b1", 2),
        (V1, "a1", 5), (V1, "a1", 6)]
    assert rows[2][3] == first[3]  # the first record under (V1, a1, 3) unchanged
    assert "note" not in rows[2][3]
    assert rows[3][3]["note"] == "other"
    assert store._read("SELECT vehicle, agent, seq, cause FROM conflicts") == [
        (V1, "a1", 3, "identity")]
    assert store._read("SELECT vehicle, agent, seq, cause FROM integrity") == [
        (V1, "a1", 3, "conflict")]


def test_a_seq_given_twice_in_a_group_is_a_conflict_whichever_key_refused_the_first(
    store: Store,
) -> None:
    """Two records under one (vehicle, agent, seq) in one group (a buffer restored from a copy
    numbering again): the first is a device frame stored before under another seq (refused by
    the device key), the second a new frame (inserted under that seq). The store then holds the
    second under the seq the first claimed as well: the first is a conflict, as when each batch
    is committed in turn. (PostgreSQL counted the inserted identity back to the first batch
    holding it, not to the row that was inserted: both were answered stored, no conflict.)"""
    ingest = Ingest(store, _known)
    assert _acks(ingest._commit_many([_batch(V1, "a1", [speed(V1, "a1", 1, device_seq=7)])])) \
        == [(V1, [(1, 1)], [], [])]
    again = _batch(V1, "a1", [speed(V1, "a1", 5, device_seq=7, at_s=1, kmh=1)])  # frame 7 again
    other = _batch(V1, "a1", [speed(V1, "a1", 5, device_seq=8)])  # frame 8, new
    assert _acks(ingest._commit_many([again, other])) == [
        (V1, [], [5], []),
        (V1, [(5, 5)], [], []),
    ]
    assert [(s, r.get("device_seq")) for _, _, s, r in _stored(store)] == [(1, 7), (5, 8)]
    assert store._read("SELECT seq, cause FROM conflicts") == [(5, "identity")]
    assert store._read("SELECT seq, cause FROM integrity") == [(5, "conflict")]


def test_a_seq_given_twice_counts_the_second_when_it_is_the_one_inserted(store: Store) -> None:
    """How many records of each batch were new, on both roads: the counts a group commit
    returns are those of the batches committed one after the other."""
    assert store.put([record_row(speed(V1, "a1", 1, device_seq=7), T0)]) == 1
    again = [record_row(speed(V1, "a1", 5, device_seq=7, at_s=1, kmh=1), T0)]
    other = [record_row(speed(V1, "a1", 5, device_seq=8), T0)]
    new = [record_row(speed(V1, "a1", n), T0) for n in (6, 7)]
    assert store.put_many([(again, [], []), (other, [], []), (new, [], [])]) == [0, 1, 2]


@pytest.mark.postgres
def test_the_stage_is_made_again_after_the_transaction_that_made_it_rolls_back(
    postgres_dsn: str,
) -> None:
    with private_schema(postgres_dsn) as (url, _):
        store = open_store(url)
        try:
            rows = [record_row(speed(V1, "a1", n), T0) for n in range(1, 6)]
            assert store.put(rows[:2]) == 2

            def fails_after_staging() -> None:
                with store._lock, store._transaction() as tx:
                    assert store._executemany(tx, INSERT_RECORD, rows[:3]) == 1  # the stage made
                    raise RuntimeError("the rest of the group failed")

            with pytest.raises(RuntimeError):
                fails_after_staging()
            assert store.count() == 2
            # the stage went with the rollback: the next write that needs it makes it again
            assert store.put_many([(rows[:4], [], []), (rows[3:], [], [])]) == [2, 1]
            assert store.count() == 5
            assert store._read("SELECT count(*) FROM pg_temp.frota_records_stage") == [(0,)]
        finally:
            store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("with_resend", [False, True], ids=["copy", "stage"])
def test_a_batch_the_database_refuses_inside_the_copy_leaves_the_others_committed(
    postgres_dsn: str, with_resend: bool,
) -> None:
    """A value PostgreSQL refuses only when it reads it (a NUL in a text column: the binary
    COPY sends it, the server refuses it mid-COPY) in one batch of a group: on either road
    (the COPY, or the stage when a resend made the COPY fail first) the group's transaction
    fails, each batch is committed alone, the bad one rejected whole and the others stored."""
    with private_schema(postgres_dsn) as (url, _):
        store = open_store(url)
        try:
            ingest = Ingest(store, _known)
            if with_resend:
                ingest._commit_many([_speeds(V1, "a1", range(1, 3))])
            good = _speeds(V1, "a1", range(1, 5))
            bad = _batch(V2, "b1", [speed(V2, "b1", n, device_seq=n) for n in range(1, 4)])
            row = list(bad.rows[1])
            row[7] = "speed:0:2\x00"  # a bug might let one through; intake never does
            bad.rows[1] = tuple(row)
            after = _speeds(V2, "b1", range(10, 12))
            items: list[tuple[str, Prepared | bytes | None, int, int]] = [
                ("frota/v1/x/up", good, 1, 1), ("frota/v1/y/up", bad, 2, 1),
                ("frota/v1/z/up", after, 3, 1)]
            ingest._answer(items)
            assert [(v, a, s) for v, a, s, _ in _stored(store)] == [
                (V1, "a1", n) for n in range(1, 5)] + [(V2, "b1", 10), (V2, "b1", 11)]
            assert store.reject_count() == 1
            [(first, last, reason)] = store._read(
                "SELECT first_seq, last_seq, reason FROM rejects")
            assert (first, last) == (1, 3)
            assert reason.startswith("the store refused the batch")
        finally:
            store.close()


@pytest.mark.postgres
def test_two_collectors_copying_overlapping_groups_at_once_store_each_record_once(
    postgres_dsn: str,
) -> None:
    """Two collectors (one shared subscription, two sessions) get overlapping batches at the
    same moment, in opposite orders (a COPY waits on the other's rows, then is refused by
    them, or the two deadlock and PostgreSQL breaks one): each record is stored once, each
    batch answered stored whole, nothing lost, nothing twice, no conflict."""
    rounds = 12
    with private_schema(postgres_dsn) as (url, _):
        stores = [open_store(url), open_store(url)]
        try:
            ingests = [Ingest(s, _known) for s in stores]
            barrier = threading.Barrier(2)
            answers: list[list[tuple[Any, ...]]] = [[], []]

            def work(me: int) -> None:
                try:
                    for r in range(rounds):
                        base = r * 20
                        seqs = range(base + 1 + 5 * me, base + 11 + 5 * me)
                        mine = [_speeds(V1, "a1", seqs), _speeds(V2, "b1", seqs)]
                        if me:
                            mine.reverse()
                        barrier.wait()
                        try:
                            got = ingests[me]._commit_many(mine)
                        except StoreError:  # as Ingest._answer: each batch alone
                            got = ingests[me]._commit_each(mine)
                        answers[me].extend(_acks(got))
                except BaseException:
                    barrier.abort()  # the other thread stops waiting for this one
                    raise

            with ThreadPoolExecutor(2) as pool:
                for done in [pool.submit(work, me) for me in (0, 1)]:
                    done.result()  # its exception, if any, raised here
            expected = sorted((v, a, base + n) for base in range(0, rounds * 20, 20)
                              for n in range(1, 16) for v, a in ((V1, "a1"), (V2, "b1")))
            stored = [(v, a, s) for v, a, s, _ in _stored(stores[0])]
            assert sorted(stored) == expected  # each once
            for me in (0, 1):
                for vehicle, ok, conflicts, rejected in answers[me]:
                    assert conflicts == []
                    assert rejected == []
                    assert [b - a for a, b in ok] == [9], (vehicle, ok)
            assert stores[0]._read("SELECT count(*) FROM conflicts") == [(0,)]
            assert stores[0]._read("SELECT count(*) FROM integrity") == [(0,)]
        finally:
            for s in stores:
                s.close()
