"""The collector's evaluation notice (protocols/evaluated.py) and the simulated agents' resend
backoff (simulators/fleet_report.py)."""

from __future__ import annotations

import random

import orjson
import pytest
import zstandard

from protocols.evaluated import Evaluated, decode_evaluated, encode_evaluated, notice_of
from protocols.uplink import PayloadError
from simulators.fleet_report import FleetReport, resend_after


def test_a_notice_names_the_judged_seqs_as_ranges_and_reads_back() -> None:
    rows = [("BUS1", "a", 3), ("BUS1", "a", 1), ("BUS1", "a", 2), ("BUS1", "a", 7),
            ("BUS1", "b", 5), ("BUS2", "a", 9)]
    notice = notice_of(rows, "c1", "2026-12-01T19:00:00.000Z")
    # 1, 2, 3 and 7 of agent a: two ranges; the other agent and vehicle apart
    assert notice.ranges == {"BUS1": {"a": [(1, 3), (7, 7)], "b": [(5, 5)]},
                             "BUS2": {"a": [(9, 9)]}}
    assert decode_evaluated(encode_evaluated(notice)) == notice


@pytest.mark.parametrize("body", [
    b"not json",
    orjson.dumps({"schema": 2, "evaluated": {}}),
    orjson.dumps({"schema": 1, "evaluated": []}),
    orjson.dumps({"schema": 1, "evaluated": {"BUS1": {"a": [[3, 1]]}}}),
    orjson.dumps({"schema": 1, "evaluated": {"BUS1": {"a": [[0, 1]]}}}),
    orjson.dumps({"schema": 1, "evaluated": {"BUS1": {"a": [[1.5, 2]]}}}),
    orjson.dumps({"schema": 1, "evaluated": {"BUS1": {"a": 7}}}),
    orjson.dumps({"schema": 1, "collector": 5, "evaluated": {}}),
])
def test_a_malformed_notice_is_a_payload_error(body: bytes) -> None:
    for payload in (body, zstandard.ZstdCompressor().compress(body)):
        with pytest.raises(PayloadError):
            decode_evaluated(payload)


def test_an_empty_notice_reads_back_empty() -> None:
    assert decode_evaluated(encode_evaluated(Evaluated(None, None))) == Evaluated(None, None)


def test_resends_back_off_exponentially_with_jitter_up_to_the_cap() -> None:
    rng = random.Random(7)
    for _ in range(200):
        # the ack timeout doubled per attempt (30 s: 30, 60, 120, 240, then the 300 s cap),
        # plus up to half of it at random: never sooner than the timeout
        assert 30.0 <= resend_after(30.0, 1, rng) <= 45.0
        assert 60.0 <= resend_after(30.0, 2, rng) <= 90.0
        assert 120.0 <= resend_after(30.0, 3, rng) <= 180.0
        assert 300.0 <= resend_after(30.0, 6, rng) <= 450.0
        assert 300.0 <= resend_after(30.0, 60, rng) <= 450.0
        # a timeout above the cap is never shortened by it
        assert 400.0 <= resend_after(400.0, 5, rng) <= 600.0
    spread = {round(resend_after(30.0, 1, rng), 3) for _ in range(50)}
    assert len(spread) > 40  # jittered: not all at once


def test_reports_of_workers_add_up() -> None:
    one = FleetReport(2, 10.0, created=20, stored=19, unanswered=1, latencies_ms=[1.0, 2.0],
                      evaluated=18, evaluated_ms=[3.0])
    two = FleetReport(3, 10.0, created=30, stored=30, latencies_ms=[4.0], evaluated=30,
                      evaluated_ms=[5.0, 6.0])
    one.merge(two)
    assert (one.vehicles, one.duration_s, one.created, one.stored, one.unanswered) == \
        (5, 10.0, 50, 49, 1)
    assert one.latencies_ms == [1.0, 2.0, 4.0]
    assert one.summary()["evaluated_ms"]["max"] == 6.0
