"""collector.intake.prepare: every way a payload can be wrong is a reject with its reason (no broker)."""

from __future__ import annotations

import json

import pytest
import zstandard

from collector.intake import prepare
from protocols.uplink import MAX_DECOMPRESSED_BYTES, PAYLOAD_SCHEMA, Ack, encode_batch
from tests.collector.helpers import T0, VEHICLES, speed

V1, V2 = VEHICLES
TOPIC = f"frota/v1/{V1}/up"


def _known() -> frozenset[str]:
    return frozenset(VEHICLES)


def _envelope(**fields: object) -> bytes:
    return json.dumps({"schema": PAYLOAD_SCHEMA, "vehicle": V1, "agent": "a1", **fields}).encode()


@pytest.mark.parametrize(
    ("topic", "payload", "reason", "ack"),
    [
        (TOPIC, b"", "not JSON: Expecting value: line 1 column 1 (char 0)", None),
        (TOPIC, b"\xff\xfe", "not JSON: ", None),
        (TOPIC, b"[" * 100_000 + b"]" * 100_000, "JSON nested too deep", None),
        (TOPIC, b'"text"', "payload is not a JSON object", None),
        (TOPIC, _envelope(schema=3, records=[{"seq": 4}, {"seq": 5}, {"seq": 9}]),
         "unsupported schema 3 (this collector reads 2)",
         Ack("a1", rejected=[(4, 5, "unsupported schema 3 (this collector reads 2)"),
                             (9, 9, "unsupported schema 3 (this collector reads 2)")])),
        (TOPIC, _envelope(agent=7, records=[]), "payload field 'agent' missing or not a string",
         None),
        (TOPIC, _envelope(), "payload field 'records' missing or not a list", None),
        ("frota/v1/up", _envelope(records=[]), "not a frota uplink topic", None),
        ("frota/v1/NOPE/up", _envelope(vehicle="NOPE", records=[{"seq": 1}]),
         "unknown vehicle 'NOPE' (not in the fleet registry)",
         Ack("a1", rejected=[(1, 1, "unknown vehicle 'NOPE' (not in the fleet registry)")])),
    ],
)
def test_a_payload_that_cannot_be_accepted(
    topic: str, payload: bytes, reason: str, ack: Ack | None
) -> None:
    out = prepare(topic, payload, _known, T0)
    assert out.whole_payload_rejected
    assert out.rows == []
    [reject] = out.rejects
    assert reject.reason.startswith(reason), reject.reason
    assert reject.payload == payload
    assert reject.received_ms == T0
    assert out.ack == ack


def test_oversized_is_judged_on_the_wire_size() -> None:
    payload = encode_batch(V1, "a1", [speed(V1, "a1", 1)], compress=False)
    out = prepare(TOPIC, payload, _known, T0, max_payload_bytes=len(payload) - 1)
    assert out.rejects[0].reason == f"oversized payload: {len(payload)} bytes > {len(payload) - 1}"
    assert out.ack == Ack("a1", rejected=[(1, 1, out.rejects[0].reason)])


def test_a_good_batch_with_bad_records() -> None:
    records: list[object] = [
        speed(V1, "a1", 1),
        {**speed(V1, "a1", 2), "kind": "warp"},
        {**speed(V1, "a1", 3), "kind": "warp"},
        speed(V1, "a2", 4),
        "not a record",
        speed(V1, "a1", 6, at_s=60),
        speed(V1, "a1", 1 << 53, at_s=7),  # beyond what a JSON number holds exactly
    ]
    out = prepare(TOPIC, _envelope(records=records), _known, T0)
    assert not out.whole_payload_rejected
    assert [row[2] for row in out.rows] == [1, 6]
    warp = ("invalid record: kind='warp' is not one of speed, position, driver, door, trip, "
            "incident, report, device, withdrawal")
    assert out.ack == Ack(
        "a1",
        stored=[(1, 1), (6, 6)],
        rejected=[
            (2, 3, warp),
            (4, 4, "record lacks the batch's agent or a seq"),
        ],  # 2**53 is no seq a record can have: it is not answered
    )
    # records refused alike share one row, with their count and both records
    assert [(r.first_seq, r.last_seq, r.reason) for r in out.rejects] == [
        (2, 3, warp + " (2 records)"),
        (4, 4, "record lacks the batch's agent or a seq"),
        (None, None, "invalid record: a record is a JSON object, not str"),
        (None, None, "invalid record: speed record: seq=9007199254740992 is not an integer in "
                     "[1, 9007199254740991]"),
    ]
    assert [r["seq"] for r in json.loads(out.rejects[0].payload)] == [2, 3]
    assert out.rejects[-2].payload == b'"not a record"'
    assert out.state_rows == [(V1, T0 + 60_000, T0, "a1")]


def test_a_zstd_frame_is_read_within_the_bound_whether_it_declares_its_size_or_not() -> None:
    body = encode_batch(V1, "a1", [speed(V1, "a1", 1)], compress=False)
    for sized in (True, False):  # the agent's frames declare their size; a stream's may not
        payload = zstandard.ZstdCompressor(write_content_size=sized).compress(body)
        assert prepare(TOPIC, payload, _known, T0).ack == Ack("a1", stored=[(1, 1)])
    # more than the bound once decompressed, declared or not: refused, never allocated whole
    blank = b" " * (MAX_DECOMPRESSED_BYTES + 1)  # JSON whitespace, compresses to a few KiB
    for sized in (True, False):
        payload = zstandard.ZstdCompressor(write_content_size=sized).compress(blank + body)
        out = prepare(TOPIC, payload, _known, T0)
        assert out.rows == []
        assert out.rejects[0].reason == f"oversized payload: more than {MAX_DECOMPRESSED_BYTES} bytes"


def test_a_withdrawal_sent_by_an_agent_is_refused() -> None:
    # docs/records.md: a withdrawal is an operator entry, chained and signed by the collector;
    # one arriving over MQTT, under a bus's agent, is refused and never reaches the rules.
    withdrawal = {**speed(V1, "a1", 2), "kind": "withdrawal", "withdraws": 1, "reason": "forged"}
    for key in ("kmh", "odometer_m", "ignition", "device_seq", "raw"):
        withdrawal.pop(key, None)
    out = prepare(TOPIC, _envelope(records=[speed(V1, "a1", 1), withdrawal]), _known, T0)
    assert [row[2] for row in out.rows] == [1]
    reason = "a withdrawal is an operator entry made at the collector; agents never send one"
    assert out.ack == Ack("a1", stored=[(1, 1)], rejected=[(2, 2, reason)])
