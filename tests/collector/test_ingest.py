"""``frota collector run`` as a real process against a private Mosquitto: store once, ack after
commit, reject with reasons, keep other vehicles flowing, survive restarts."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collector.store import open_store
from protocols.uplink import MAX_PAYLOAD_BYTES, PAYLOAD_SCHEMA, ZSTD_MAGIC, Ack, encode_batch
from tests.collector.helpers import AgentSide, CollectorProcess, speed
from tests.services import Mosquitto

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty]

V1, V2 = "ABC1D23", "XYZ9K88"


@pytest.fixture
def collector(tmp_path: Path, mosquitto: Mosquitto) -> Iterator[CollectorProcess]:
    """The collector, connected to the private broker."""
    proc = CollectorProcess(tmp_path, mosquitto.url)
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _stored(db: Path, vehicle: str) -> list[dict[str, object]]:
    store = open_store(str(db), create=False)
    try:
        return [json.loads(line) for line in store.records(vehicle)]
    finally:
        store.close()


def test_batches_are_stored_once_and_acked_again(
    collector: CollectorProcess, agent: AgentSide
) -> None:
    records = [speed(V1, "a1", seq) for seq in range(1, 6)]
    payload = encode_batch(V1, "a1", records)
    agent.publish(V1, payload)
    assert agent.wait_ack(V1) == Ack(agent="a1", stored=[(1, 5)])
    agent.publish(V1, payload)  # the agent never heard the ack: it sends the batch again
    assert agent.wait_ack(V1) == Ack(agent="a1", stored=[(1, 5)])
    # uncompressed JSON is accepted too; 5 overlaps, 6 and 7 are new
    more = [speed(V1, "a1", seq) for seq in (5, 6, 7)]
    agent.publish(V1, encode_batch(V1, "a1", more, compress=False))
    assert agent.wait_ack(V1) == Ack(agent="a1", stored=[(5, 7)])

    stored = _stored(collector.db, V1)
    assert [r["seq"] for r in stored] == [1, 2, 3, 4, 5, 6, 7]
    assert stored[0] == records[0]  # the record as received, ts/agent/seq untouched


def test_a_device_frame_received_twice_is_one_record(
    collector: CollectorProcess, agent: AgentSide
) -> None:
    live = [
        speed(V1, "a1", 1, at_s=10, device_seq=500, raw="aa01"),
        {"vehicle": V1, "ts": speed(V1, "a1", 2, at_s=10)["ts"], "kind": "driver", "agent": "a1",
         "seq": 2, "slot": 1, "driver": "D-1", "activity": "drive", "device_seq": 500},
        {"vehicle": V1, "ts": speed(V1, "a1", 3, at_s=10)["ts"], "kind": "driver", "agent": "a1",
         "seq": 3, "slot": 2, "driver": "D-2", "activity": "available", "device_seq": 500},
    ]
    agent.publish(V1, encode_batch(V1, "a1", live))
    assert agent.wait_ack(V1) == Ack(agent="a1", stored=[(1, 3)])
    # the history download brings the same frame (same device_seq, device time) under new seqs,
    # plus a frame whose counter wrapped to 500 again at another time: that one is new
    history = [
        {**live[0], "seq": 4},
        {**live[1], "seq": 5},
        {**live[2], "seq": 6},
        speed(V1, "a1", 7, at_s=70_000, device_seq=500, raw="aa02"),
    ]
    agent.publish(V1, encode_batch(V1, "a1", history))
    assert agent.wait_ack(V1) == Ack(agent="a1", stored=[(4, 7)])
    assert [r["seq"] for r in _stored(collector.db, V1)] == [1, 2, 3, 7]


def _oversized() -> bytes:
    records = [speed(V1, "a1", seq, raw="ab" * 1000) for seq in range(1, 601)]
    body = json.dumps({"schema": PAYLOAD_SCHEMA, "vehicle": V1, "agent": "a1", "records": records})
    assert len(body) > MAX_PAYLOAD_BYTES
    return body.encode()


def _batch(vehicle: str, recs: list[dict[str, object]], **envelope: object) -> bytes:
    body = {"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": "a1", "records": recs}
    return json.dumps({**body, **envelope}).encode()


def _rejected_for(reason: str) -> Callable[[Ack], bool]:
    return lambda ack: bool(ack.rejected) and ack.rejected[0][2].startswith(reason)


def test_malformed_payloads_are_kept_with_their_reason_and_answered(
    collector: CollectorProcess, agent: AgentSide
) -> None:
    two = [speed(V1, "a1", 1), speed(V1, "a1", 2)]
    zstd_garbage = ZSTD_MAGIC + b"\xff" * 16
    # (topic vehicle, payload, reason starts with, negative ack expected as (first, last))
    cases: list[tuple[str, bytes, str, tuple[int, int] | None]] = [
        (V1, b"\x00\xff\xfe garbage", "not JSON", None),
        (V1, b"{not json", "not JSON", None),
        (V1, zstd_garbage, "corrupt zstd payload", None),
        (V1, b"[1, 2]", "payload is not a JSON object", None),
        (V1, _batch(V1, two, schema=99), "unsupported schema 99", (1, 2)),
        (V1, _batch(V1, two, records="no"), "payload field 'records' missing or not a list", None),
        (V1, _oversized(), "oversized payload", (1, 600)),
        (V1, _batch(V2, [speed(V2, "a1", 1)]), "batch vehicle 'XYZ9K88' differs", (1, 1)),
        ("NOPE123", _batch("NOPE123", [speed("NOPE123", "a1", 9)]), "unknown vehicle 'NOPE123'",
         (9, 9)),
    ]
    for vehicle, payload, _reason, _ranges in cases:
        agent.publish(vehicle, payload)
    # meanwhile another vehicle's batch goes through
    agent.publish(V2, encode_batch(V2, "b1", [speed(V2, "b1", 1)]))
    assert agent.wait_ack(V2, lambda a: a.agent == "b1") == Ack(agent="b1", stored=[(1, 1)])
    for vehicle, _payload, reason, ranges in cases:
        if ranges is None:
            continue
        ack = agent.wait_ack(vehicle, _rejected_for(reason))
        assert ack.stored == []
        assert [(a, b) for a, b, _ in ack.rejected] == [ranges]
        assert ack.rejected[0][2].startswith(reason)

    # one record invalid in a batch: the others are stored, that one is rejected
    bad = {**speed(V1, "a1", 3), "kmh": -1}
    agent.publish(V1, encode_batch(V1, "a1", [speed(V1, "a1", 2), bad, speed(V1, "a1", 4)]))
    ack = agent.wait_ack(V1, lambda a: bool(a.stored))
    assert ack.stored == [(2, 2), (4, 4)]
    assert ack.rejected == [(3, 3, "invalid record: speed record: kmh=-1 is not a number in [0, 400]")]

    store = open_store(str(collector.db), create=False)
    try:
        rejects = list(reversed(store.rejects()))
    finally:
        store.close()
    assert len(rejects) == len(cases) + 1
    for row, (vehicle, payload, reason, ranges) in zip(rejects, cases, strict=False):
        assert row["topic"] == f"frota/v1/{vehicle}/up"
        assert str(row["reason"]).startswith(reason), (row["reason"], reason)
        assert row["payload"] == payload  # kept whole
        if ranges is not None:
            assert (row["agent"], row["first_seq"], row["last_seq"]) == ("a1", *ranges)
    assert rejects[-1]["first_seq"] == 3
    assert json.loads(rejects[-1]["payload"]) == bad
    assert [r["seq"] for r in _stored(collector.db, V1)] == [2, 4]
    health = collector.wait_health(200)
    assert health["rejects"] == len(cases) + 1


def test_a_restarted_collector_gets_what_was_queued_while_it_was_away(
    tmp_path: Path, mosquitto: Mosquitto, agent: AgentSide
) -> None:
    proc = CollectorProcess(tmp_path, mosquitto.url)
    proc.start()
    assert proc.stop() == 0
    for first in (1, 11, 21):  # the broker queues these for the collector's persistent session
        records = [speed(V1, "a1", seq) for seq in range(first, first + 10)]
        agent.publish(V1, encode_batch(V1, "a1", records))
    proc.start()
    try:
        got = sorted(agent.wait_ack(V1).stored[0] for _ in range(3))
        assert got == [(1, 10), (11, 20), (21, 30)]
        assert len(_stored(proc.db, V1)) == 30
    finally:
        assert proc.stop() == 0


def test_the_collector_resubscribes_after_a_broker_restart(
    collector: CollectorProcess, mosquitto: Mosquitto, agent: AgentSide
) -> None:
    mosquitto.stop()
    down = collector.wait_health(503)
    assert down["broker"]["connected"] is False
    assert down["status"] == "broker disconnected"
    mosquitto.start()
    collector.wait_health(200)
    assert agent.subscribed.wait(10)
    # like an agent: send until acknowledged (the broker forgot every session and subscription)
    payload = encode_batch(V1, "a1", [speed(V1, "a1", 1)])
    for _ in range(40):
        agent.publish(V1, payload)
        try:
            ack = agent.wait_ack(V1, timeout=0.5)
            break
        except TimeoutError:
            continue
    else:
        raise AssertionError("no ack after the broker restart")
    assert ack == Ack(agent="a1", stored=[(1, 1)])
    assert len(_stored(collector.db, V1)) == 1
