"""Rules part 2 under any arrival order: shuffling, re-batching and looking at the findings between
batches (as the collector does) never change the output."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.collector.rules.timeline import MIN, engine_findings, numbered, rebatched_findings
from tests.collector.rules.trip_fixture import REGISTRY, X, departed


def _rich() -> list[dict[str, Any]]:
    """Boarding above the seats, a door open while moving, a breakdown away from every point with
    the carrier at fault, a replacement vehicle after 121 min, a report, a registrador fault."""
    tl = departed("SP-R", boarded=42)
    tl.door("V1", 45 * MIN, is_open=True).door("V1", 45 * MIN + 5000)
    tl.add("incident", "V1", 61 * MIN, cause="breakdown", carrier_fault=True)
    tl.add("device", "V1", 62 * MIN, device="registrador", status="fault")
    tl.door("V1", 70 * MIN, alighted=2)
    tl.slot("V2", 170 * MIN, 1, "C2", "work").speed("V2", 170 * MIN, 0).at("V2", 170 * MIN, X)
    tl.start_trip("V2", 181 * MIN, "SP-R", None)
    tl.add("report", "V1", 190 * MIN, incident_ts=tl.ts(61 * MIN), to="passengers")
    tl.moving("V2", 200 * MIN, 260 * MIN)
    tl.add("trip", "V2", 270 * MIN, event="end", trip="T1", line="SP-R")
    return numbered(tl.records)


RECORDS = _rich()


REFERENCE = engine_findings(REGISTRY, RECORDS)


def test_the_reference_holds_the_rules_of_part_2() -> None:
    rules = {f["rule"] for f in REFERENCE}
    assert {"trip.interruption", "trip.assistance_due", "occupancy.standing",
            "doors.open_while_moving", "equipment.registrador", "stops.unapproved"} <= rules
    (stop,) = [f for f in REFERENCE if f["rule"] == "trip.interruption"]
    assert (stop["severity"], stop["details"]["replacement"]) == ("infraction", "V2")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(len(RECORDS))),
       cuts=st.lists(st.integers(0, len(RECORDS)), max_size=6),
       peek=st.booleans())
def test_shuffling_and_rebatching_never_change_the_output(order: list[int], cuts: list[int],
                                                          peek: bool) -> None:
    assert rebatched_findings(REGISTRY, RECORDS, order, cuts, peek) == REFERENCE
