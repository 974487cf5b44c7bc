"""A partition's records read for many vehicles at once (collector/store_partition.py): the same
records, in ``frota check``'s order, as reading them vehicle by vehicle."""

from __future__ import annotations

from collector.intake import prepare
from collector.store import Store
from collector.store_partition import partition_records
from protocols.uplink import encode_batch
from tests.collector.helpers import T0, VEHICLES, speed

V1, V2 = VEHICLES


def _put(store: Store, vehicle: str, agent: str, at_s: list[int]) -> None:
    records = [speed(vehicle, agent, n, at_s=s) for n, s in enumerate(at_s, start=1)]
    done = prepare(f"frota/v1/{vehicle}/up", encode_batch(vehicle, agent, records),
                   lambda: frozenset(VEHICLES), T0)
    store.put(done.rows, done.rejects, done.state_rows)


def test_the_partition_reads_every_record_once_in_check_order(store: Store) -> None:
    # seconds after T0: in one 10 s window, across windows, an hour later (an empty stretch
    # jumped), and two agents of one bus at the same instant
    _put(store, V1, "a", [0, 5, 5, 25, 3600])
    _put(store, V2, "b", [5, 9, 10, 7200])
    _put(store, V1, "c", [5])
    got = [(ms, v, seq, agent) for ms, v, seq, agent, _ in
           partition_records(store, [V1, V2], None, T0 + 10_000_000)]
    s = 1000
    assert got == [
        (T0, V1, 1, "a"),
        (T0 + 5 * s, V1, 1, "c"), (T0 + 5 * s, V1, 2, "a"), (T0 + 5 * s, V1, 3, "a"),
        (T0 + 5 * s, V2, 1, "b"),
        (T0 + 9 * s, V2, 2, "b"), (T0 + 10 * s, V2, 3, "b"),
        (T0 + 25 * s, V1, 4, "a"), (T0 + 3600 * s, V1, 5, "a"), (T0 + 7200 * s, V2, 4, "b"),
    ]
    # since <= ts < until, one vehicle only
    assert [(ms, seq) for ms, _, seq, _, _ in
            partition_records(store, [V2], T0 + 9 * s, T0 + 7200 * s)] == \
        [(T0 + 9 * s, 2), (T0 + 10 * s, 3)]
    assert list(partition_records(store, [V1], T0 + 7300 * s, T0 + 9000 * s)) == []
