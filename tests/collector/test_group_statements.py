"""A group commit writes each kind of row of all its batches together (one statement each on
PostgreSQL) and still answers every batch for itself: what was new in it, its conflicts."""

from __future__ import annotations

from typing import Any

from collector.ingest import Ingest
from collector.intake import Prepared, prepare
from collector.store import Store
from protocols.uplink import Ack, encode_batch
from tests.collector.helpers import T0, VEHICLES, speed

V1, V2 = VEHICLES


def _known() -> frozenset[str]:
    return frozenset(VEHICLES)


def _batch(vehicle: str, agent: str, seqs: range, **extra: Any) -> Prepared:
    records = [speed(vehicle, agent, n, **extra) for n in seqs]
    return prepare(f"frota/v1/{vehicle}/up", encode_batch(vehicle, agent, records), _known, T0)


def test_a_batch_and_its_resend_in_one_group_are_stored_once(store: Store) -> None:
    ingest = Ingest(store, _known)
    first, other, resend = (_batch(V1, "a1", range(1, 4)), _batch(V2, "b1", range(1, 3)),
                            _batch(V1, "a1", range(2, 6)))
    counts = store.put_many([(p.rows, p.rejects, p.state_rows) for p in (first, other, resend)],
                            [p.chain for p in (first, other, resend)])
    # a1 1-3 new in the first; b1 1-2 new; the resend brings 2-3 again and 4-5 new
    assert counts == [3, 2, 2]
    assert store.count() == 7
    assert not any(p.chain.conflicts for p in (first, other, resend) if p.chain is not None)
    answers = ingest._commit_many([_batch(V1, "a1", range(5, 7))])
    assert answers == [(V1, Ack("a1", stored=[(5, 6)]))]  # 5 was stored already: still "stored"
    assert store.count() == 8


def test_a_conflict_inside_one_group_is_found_in_the_later_batch(store: Store) -> None:
    ingest = Ingest(store, _known)
    mine, theirs = _batch(V1, "a1", range(1, 3)), _batch(V1, "a1", range(2, 4), kmh_note="x")
    answers = ingest._commit_many([mine, theirs])
    # seq 2 arrives twice with different content: the first kept, the second a conflict
    assert answers[0] == (V1, Ack("a1", stored=[(1, 2)]))
    _, ack = answers[1]  # type: ignore[misc]
    assert ack.conflicts == [2]
    assert ack.stored == [(3, 3)]
    assert store.count() == 3
    assert store._read("SELECT seq, cause FROM conflicts") == [(2, "identity")]


def test_a_long_batch_in_multi_row_statements_counts_each_new_row(store: Store) -> None:
    # 300 records: on SQLite statements of 128 + 128 + 32 + 8 + 4 rows (collector/store_sqlite.py
    # ROWS_PER_INSERT, then powers of two); seqs 1-50 stored before, so 250 are new
    ingest = Ingest(store, _known)
    ingest._commit_many([_batch(V1, "a1", range(1, 51))])
    long = _batch(V1, "a1", range(1, 301))
    resend_inside = _batch(V1, "a1", range(290, 301))  # in the same group: nothing new
    counts = store.put_many([(p.rows, p.rejects, p.state_rows) for p in (long, resend_inside)],
                            [p.chain for p in (long, resend_inside)])
    assert counts == [250, 0]
    assert store.count() == 300
    seqs = [seq for (seq,) in store._read("SELECT seq FROM records ORDER BY seq")]
    assert seqs == list(range(1, 301))


def test_the_statement_split_covers_every_row_once() -> None:
    from collector.store import INSERT_RECORD
    from collector.store_sqlite import _multi_row

    two = _multi_row(INSERT_RECORD, 2)
    assert two.count("(?,") == 2
    assert two.endswith(" ON CONFLICT DO NOTHING")
    assert two.startswith("INSERT INTO records (vehicle, agent, seq,")
