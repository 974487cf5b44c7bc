"""One bad batch never rolls back another committed with it (issue 12 item 4); what the collector
keeps of vehicles it does not know is bounded."""

from __future__ import annotations

from collector.ingest import Ingest
from collector.intake import Prepared, prepare
from collector.store import Store
from protocols.uplink import Ack, encode_batch
from tests.collector.helpers import T0, VEHICLES, speed

V1, V2 = VEHICLES


def _known() -> frozenset[str]:
    return frozenset(VEHICLES)


def _batch(vehicle: str, agent: str, seqs: range) -> Prepared:
    records = [speed(vehicle, agent, n) for n in seqs]
    return prepare(f"frota/v1/{vehicle}/up", encode_batch(vehicle, agent, records), _known, T0)


def test_a_batch_the_store_refuses_does_not_take_the_others_down(store: Store) -> None:
    ingest = Ingest(store, _known)
    good_before, bad, good_after = _batch(V1, "a1", range(1, 4)), _batch(V2, "b1", range(1, 3)), \
        _batch(V1, "a1", range(4, 6))
    # A value no SQLite INTEGER holds (intake never lets one through; a bug might): the group's
    # transaction fails, and each batch is then committed alone.
    row = list(bad.rows[1])
    row[2] = 1 << 64
    bad.rows[1] = tuple(row)
    answers = ingest._commit_each([good_before, bad, good_after])
    assert store.count() == 5  # 1-3 and 4-5 of a1; nothing of b1
    assert answers[0] == (V1, Ack("a1", stored=[(1, 3)]))
    assert answers[2] == (V1, Ack("a1", stored=[(4, 5)]))
    vehicle, ack = answers[1]  # type: ignore[misc]
    assert vehicle == V2
    assert ack.stored == []
    [(first, last, reason)] = ack.rejected
    assert (first, last) == (1, 1)  # seq 2 became 2**64: no seq an agent can be told about
    assert reason.startswith("the store refused the batch: OverflowError")
    assert store.reject_count() == 1


def test_the_group_path_falls_back_to_one_batch_at_a_time(store: Store) -> None:
    ingest = Ingest(store, _known)
    bad = _batch(V2, "b1", range(1, 3))
    row = list(bad.rows[0])
    row[2] = 1 << 64
    bad.rows[0] = tuple(row)
    items: list[tuple[str, Prepared | bytes | None, int, int]] = [
        ("frota/v1/x/up", _batch(V1, "a1", range(1, 4)), 1, 1), ("frota/v1/y/up", bad, 2, 1)]
    ingest._answer(items)
    assert store.count() == 3
    assert store.reject_count() == 1


def test_vehicles_it_does_not_know_are_counted_not_kept(store: Store) -> None:
    ingest = Ingest(store, _known)
    for n in range(500):
        ingest.handle(f"frota/v1/GHOST{n}/up", b"garbage")
        ingest.handle_status(f"frota/v1/GHOST{n}/status", b'{"status":"online"}')
    ingest.handle_status(f"frota/v1/{V1}/status", b'{"status":"online"}')
    for garbage in (b"\xff", b"[]", b'{"status": 7}', b"[" * 100_000):
        ingest.handle_status(f"frota/v1/{V1}/status", garbage)
    health = ingest.health(300)
    assert health["unreadable_status_payloads"] == 4
    assert set(health["vehicles"]) == {V1}
    assert health["unknown_vehicle_messages"] == 1000
    assert health["rejects"] == 500


def test_health_answers_whatever_time_a_store_holds(store: Store) -> None:
    # A store written before times were bounded may hold any value; /health still answers.
    ingest = Ingest(store, _known)
    live = ingest.state.vehicle(V1)
    live.last_ts_ms = 253_402_300_800_000 + 86_400_000  # 10000-01-02T00:00:00Z
    live.last_received_ms = -62_135_596_800_000 - 14 * 3_600_000  # year 0
    health = ingest.health(300, at_ms=T0)
    assert health["vehicles"][V1]["latest_record_ts"] == "+10000-01-02T00:00:00.000Z"
    assert health["vehicles"][V1]["last_received"] == "0000-12-31T10:00:00.000Z"
