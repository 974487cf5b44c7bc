"""A record's ``prev`` (and a batch's checkpoint, before the verifier checks its signature) is
written by whoever publishes the batch: at ingest it proves nothing about the record before it.
So the collector never takes a record's hash "confirmed by the chain" in place of the checks of
its canonical form (docs/trust.md, "What it costs", "Since 2026-12-05, evening"): a record with
no canonical form is refused even when the next record's ``prev`` and the checkpoint name the
SHA-256 of the bytes ``orjson`` writes for it."""

from __future__ import annotations

import hashlib
import json

import orjson

from collector.intake import prepare
from protocols.chain import GENESIS, record_hash
from tests.trust.fleet import A, speed

TOPIC = f"frota/v1/{A}/up"
AGENT = "a1"


def _bytes_hash(rec: dict[str, object]) -> str:
    """What a forger puts in the next ``prev``: the hash of the record as orjson writes it
    (keys sorted; NaN written ``null``), with none of the canonical form's checks."""
    return hashlib.sha256(orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _batch(extras: list[dict[str, object]]) -> tuple[bytes, list[dict[str, object]]]:
    """Speed records seq 1.. with ``extras`` merged in, each ``prev`` the previous record's
    ``_bytes_hash``, the checkpoint naming the last one's; as JSON that allows NaN (as
    the collector's parser does)."""
    recs: list[dict[str, object]] = []
    prev = GENESIS
    for seq, extra in enumerate(extras, start=1):
        rec = {**speed(A, seq, 60.0 + seq), "agent": AGENT, "seq": seq, "prev": prev, **extra}
        prev = _bytes_hash(rec)
        recs.append(rec)
    checkpoint = {"seq": len(recs), "hash": prev, "key": "0" * 16, "sig": "A" * 88}
    payload = {"schema": 2, "vehicle": A, "agent": AGENT, "checkpoint": checkpoint,
               "records": recs}
    return json.dumps(payload).encode(), recs


def test_a_prev_over_non_canonical_bytes_admits_no_record_without_a_canonical_form() -> None:
    # seq 1: a NaN in a field validation does not know (orjson writes it null); seq 2 and 3:
    # a `scheduled` / `incident_ts` that is no time on a speed record (validation does not look
    # at them there); seq 4: an honest record, whose bytes are canonical; seq 5, the last
    # (named by the checkpoint): a NaN again
    payload, recs = _batch([{"x": float("nan")}, {"scheduled": "garbage"},
                            {"incident_ts": "9999-12-31T23:59:59.000Z"}, {}, {"y": float("inf")}])
    out = prepare(TOPIC, payload, lambda: frozenset({A}), 1_000)
    assert out.agent == AGENT
    assert [row[2] for row in out.rows] == [4]  # only the record with a canonical form
    assert out.ack is not None
    assert out.ack.stored == [(4, 4)]
    assert sorted(b for _, b, _ in out.ack.rejected) == [1, 2, 3, 5]
    assert all("canonical" in why for _, _, why in out.ack.rejected)
    # the stored record's hash is its canonical form's, not one a prev or checkpoint named
    assert out.rows[0][11] == record_hash(recs[3])


def test_a_prev_over_a_non_canonical_form_does_not_change_a_records_hash() -> None:
    # whole doubles (61.0) and a double beyond its precision: orjson's bytes are not the
    # canonical form; the next prev naming their hash does not make it the record's hash
    payload, recs = _batch([{"kmh": 61.0}, {"kmh": 62.123456789}, {}])
    out = prepare(TOPIC, payload, lambda: frozenset({A}), 1_000)
    assert [row[2] for row in out.rows] == [1, 2, 3]
    assert [row[11] for row in out.rows] == [record_hash(r) for r in recs]
    assert out.rows[0][11] != _bytes_hash(recs[0])
    assert out.rows[1][11] != _bytes_hash(recs[1])
