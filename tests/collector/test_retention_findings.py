"""``retention.minimum`` findings (issue 15 item 4): records missing inside the minimum period.

"Now" is 2026-12-01T15:00Z; the SP minimum (365 days) reaches back to 2025-12-01 00:00 local
(2025-12-01T03:00Z). Hand-built days (São Paulo is UTC-3):

- agent a1 on 2026-11-20 from 12:00Z, one record a minute, seq 1-10 without 5 and 6: "seq 5-6
  missing", starting at seq 4's time (12:04Z, local day 2026-11-20);
- registrador frames (device_seq) 1, 2, 3, 6 on the same day: "registrador frames 4-5 missing";
- positions at 60 km/h on 2026-11-21 13:10Z and 14:20Z (10:10 and 11:20 local) with no
  registrador record in those hours: "2 h from 2026-11-21 10:00 moving by GPS with no registrador
  record", 13:00Z to 15:00Z;
- the same kinds of gaps on 2025-06-01, before the minimum period: no finding;
- agent b1 whose oldest record is seq 5 (2026-11-25), its seqs 1-4 never stored nor pruned:
  "seq 1-4 missing: the oldest record kept is seq 5" (short_history).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collector import compaction, registry, retention
from collector.retention_days import LAST_ID, Summaries
from collector.retention_findings import retention_findings
from collector.rules.profile import load_profiles
from collector.store import Store, record_row
from protocols.records import ms_to_ts, ts_to_ms

BUS = "ABC1D23"
NOW = ts_to_ms("2026-12-01T15:00:00Z")
DAY = ts_to_ms("2026-11-20T12:00:00Z")
OLD = ts_to_ms("2025-06-01T12:00:00Z")
MINUTE = 60_000


def _speed(agent: str, seq: int, at: int, **extra: Any) -> dict[str, Any]:
    return {"vehicle": BUS, "ts": ms_to_ts(at), "kind": "speed", "agent": agent, "seq": seq,
            "kmh": 50, **extra}


def _position(agent: str, seq: int, at: int) -> dict[str, Any]:
    return {"vehicle": BUS, "ts": ms_to_ts(at), "kind": "position", "agent": agent, "seq": seq,
            "lat": -23.5, "lon": -46.6, "kmh": 60.0}


def _day(agent: str, start: int, first_seq: int) -> list[dict[str, Any]]:
    """seq first..first+9 a minute apart without the 5th and 6th; frames 1, 2, 3, 6."""
    frames = {0: 1, 1: 2, 2: 3, 7: 6}
    return [_speed(agent, first_seq + i, start + i * MINUTE,
                   **({"device_seq": frames[i]} if i in frames else {}))
            for i in range(10) if i not in (4, 5)]


def _fleet(tmp_path: Path) -> registry.Registry:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"lines": [], "drivers": [], "vehicles": [
        {"id": BUS, "seats": 46, "profile": "SP"}]}))
    return registry.load(path)


def _put(store: Store, records: list[dict[str, Any]]) -> None:
    store.put([record_row(r, NOW) for r in records])


def _gaps(store: Store, fleet: registry.Registry) -> list[tuple[str, str, str, str]]:
    found = retention_findings(store, fleet, load_profiles(), NOW)
    for one in found:
        assert one["basis"] == ["Decreto SP 29.913/1989 art. 61 §3"]
        assert one["severity"] == "infraction"
    return sorted((f["details"]["cause"], f["details"]["gap"], f["details"]["day"], f["start"])
                  for f in found)


def test_seq_frame_and_gps_gaps_inside_the_minimum(store: Store, tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    _put(store, _day("a1", OLD, 1))             # seq 1-10 in 2025-06: gaps before the minimum
    _put(store, _day("a1", DAY, 11))            # seq 11-20: 15, 16 missing; frames 4-5 missing
    _put(store, [_position("a1", 21, ts_to_ms("2026-11-21T13:10:00Z")),
                 _position("a1", 22, ts_to_ms("2026-11-21T14:20:00Z"))])
    assert _gaps(store, fleet) == [
        ("frame_gap", "registrador frames 4-5 missing", "2026-11-20", "2026-11-20T12:02:00.000Z"),
        ("no_registrador", "2 h from 2026-11-21 10:00 moving by GPS with no registrador record",
         "2026-11-21", "2026-11-21T13:00:00.000Z"),
        ("seq_gap", "seq 15-16 missing", "2026-11-20", "2026-11-20T12:03:00.000Z"),
    ]


def test_a_vehicle_day_with_one_missing_seq_names_it(store: Store, tmp_path: Path) -> None:
    _put(store, [_speed("a1", s, DAY + s * MINUTE) for s in (1, 2, 4)])
    assert _gaps(store, _fleet(tmp_path)) == [
        ("seq_gap", "seq 3 missing", "2026-11-20", "2026-11-20T12:02:00.000Z")]


def test_records_lost_from_the_start_of_the_minimum_period(store: Store, tmp_path: Path) -> None:
    _put(store, [_speed("b1", s, ts_to_ms("2026-11-25T12:00:00Z") + s * MINUTE)
                 for s in (5, 6, 7)])
    assert _gaps(store, _fleet(tmp_path)) == [
        ("short_history", "seq 1-4 missing: the oldest record kept is seq 5", "2025-12-01",
         "2025-12-01T03:00:00.000Z")]


def test_records_pruned_past_the_minimum_are_no_finding(store: Store, tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    records = [_speed("c1", 1, ts_to_ms("2025-11-01T12:00:00Z")),
               _speed("c1", 2, ts_to_ms("2025-12-05T12:00:00Z")),
               _speed("c1", 3, ts_to_ms("2025-12-05T12:01:00Z"))]
    _put(store, records)
    store.apply([("INSERT INTO links (vehicle, agent, seq, hash, prev, state, received_ms) "
                  "VALUES (?, 'c1', ?, 'h', NULL, 'stored', 0)", [(BUS, s) for s in (1, 2, 3)])])
    retention.prune(store, fleet, load_profiles(), None, now_ms=NOW)
    assert [json.loads(t)["seq"] for t in store.records(BUS)] == [2, 3]
    assert _gaps(store, fleet) == []


def test_the_same_findings_from_compacted_days(store: Store, tmp_path: Path) -> None:
    from collector import compaction, store_disc

    fleet = _fleet(tmp_path)
    _put(store, _day("a1", OLD, 1))
    _put(store, _day("a1", DAY, 11))
    _put(store, [_position("a1", 21, ts_to_ms("2026-11-21T13:10:00Z")),
                 _position("a1", 22, ts_to_ms("2026-11-21T14:20:00Z"))])
    _put(store, [_speed("b1", s, ts_to_ms("2026-11-25T12:00:00Z") + s * MINUTE)
                 for s in (5, 6, 7)])
    before = _gaps(store, fleet)
    assert len(before) == 4
    compaction.compact(store, fleet, load_profiles(), now_ms=NOW, pause_s=0)
    # every day compacted (the newest, 2026-11-25, is 6 days old)
    assert int(store._read("SELECT count(*) FROM records")[0][0]) == 0
    assert len(store_disc.days(store, BUS)) == 4
    assert _gaps(store, fleet) == before


EXPECTED = [
    ("frame_gap", "registrador frames 4-5 missing", "2026-11-20", "2026-11-20T12:02:00.000Z"),
    ("no_registrador", "2 h from 2026-11-21 10:00 moving by GPS with no registrador record",
     "2026-11-21", "2026-11-21T13:00:00.000Z"),
    ("seq_gap", "seq 15-16 missing", "2026-11-20", "2026-11-20T12:03:00.000Z"),
]


def test_summaries_follow_bursts_a_late_frame_and_compacted_days(store: Store,
                                                                  tmp_path: Path) -> None:
    """The first test's days delivered in bursts to a collector's summaries (kept between
    evaluations), the day's first record (seq 11, frame 1) last: the same findings; then every
    day compacted (its records no longer rows): the same findings again, summed up afresh."""
    fleet = _fleet(tmp_path)
    kept = Summaries(store)
    day = _day("a1", DAY, 11)
    positions = [_position("a1", 21, ts_to_ms("2026-11-21T13:10:00Z")),
                 _position("a1", 22, ts_to_ms("2026-11-21T14:20:00Z"))]
    for burst in (_day("a1", OLD, 1), day[1:], positions, day[:1]):
        _put(store, burst)
        found = retention_findings(store, fleet, load_profiles(), NOW, summaries=kept)
    assert sorted((f["details"]["cause"], f["details"]["gap"], f["details"]["day"], f["start"])
                  for f in found) == EXPECTED
    done = compaction.compact(store, fleet, load_profiles(), now_ms=NOW, after_days=2,
                              pause_s=0)
    assert len(done) == 3                       # 2025-06-01, 2026-11-20, 2026-11-21
    assert store._read("SELECT count(*) FROM records")[0][0] == 0
    store.apply([("DELETE FROM retention_days", [()]),
                 ("DELETE FROM findings_state WHERE name = ?", [(LAST_ID,)])])
    assert _gaps(store, fleet) == EXPECTED
