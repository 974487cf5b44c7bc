"""The engine: order, batches and late records never change the findings; ids are stable."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.rules import Engine, LateRecordError
from tests.collector.rules.timeline import (
    HOUR,
    MIN,
    PROFILES,
    REGISTRY,
    Timeline,
    engine_findings,
    numbered,
    rebatched_findings,
)

S = 1000


def _rich() -> list[dict[str, Any]]:
    """Two buses, two drivers swapping and changing buses, speeding, trips, no card."""
    tl = Timeline()
    tl.trip("V1", 0, "start", "T1", "SP-1").slot("V1", 0, 1, "C1", "drive")
    for t in range(40):
        tl.speed("V1", t * S, 95 if 5 <= t < 25 else 70)
    tl.moving("V1", 40 * S, 6 * HOUR, every_ms=20 * MIN)
    tl.slot("V1", 3 * HOUR, 1, "C2", "drive").slot("V1", 3 * HOUR, 2, "C1", "rest")
    tl.trip("V1", 6 * HOUR, "end", "T1", "SP-1")
    tl.slot("V1", 6 * HOUR, 2, None, "unknown")
    tl.slot("V2", 6 * HOUR + 2 * MIN, 1, "C1", "drive")
    tl.moving("V2", 6 * HOUR + 2 * MIN, 9 * HOUR, every_ms=20 * MIN)
    tl.moving("V1", 7 * HOUR, 7 * HOUR + 5 * MIN, every_ms=30 * S)  # C2 still in slot 1
    tl.slot("V1", 7 * HOUR + 10 * MIN, 1, None, "unknown")
    tl.moving("V1", 8 * HOUR, 8 * HOUR + 3 * MIN, every_ms=30 * S)  # nobody at the wheel
    return numbered(tl.records)


RECORDS = _rich()


REFERENCE = engine_findings(REGISTRY, RECORDS)


def test_the_reference_has_findings_of_every_kind() -> None:
    rules = {f["rule"] for f in REFERENCE}
    assert {"speed.over_limit", "driver.continuous_driving", "driver.unidentified"} <= rules


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(len(RECORDS))),
       cuts=st.lists(st.integers(0, len(RECORDS)), max_size=6),
       peek=st.booleans())
def test_shuffling_and_rebatching_never_change_the_output(order: list[int], cuts: list[int],
                                                          peek: bool) -> None:
    latest = max(r["ts"] for r in RECORDS)
    assert rebatched_findings(REGISTRY, RECORDS, order, cuts, peek) == REFERENCE
    assert all(f["start"] <= latest for f in REFERENCE)


def test_a_late_record_without_retention_is_refused() -> None:
    engine = Engine(REGISTRY, PROFILES, "SP", retain=False)
    engine.add(RECORDS[10:])
    engine.flush(final=True)
    engine.add(RECORDS[:10])
    with pytest.raises(LateRecordError):
        engine.flush()


def test_a_late_backlog_is_merged_with_retention() -> None:
    engine = Engine(REGISTRY, PROFILES, "SP")
    half = len(RECORDS) // 2
    engine.add(RECORDS[half:])
    engine.findings()
    engine.add(RECORDS[:half])  # the backlog of the morning arrives after live data
    assert engine.findings() == REFERENCE


def test_findings_are_in_contract_order() -> None:
    keys = [(f["start"], f["rule"], f["vehicle"] or "", f["driver"] or "", f["id"])
            for f in REFERENCE]
    assert keys == sorted(keys)
    assert len({f["id"] for f in REFERENCE}) == len(REFERENCE)
