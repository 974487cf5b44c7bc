"""The canonical record: timestamps and validation (contract.md)."""

from __future__ import annotations

import pytest

from protocols.records import RecordError, make_record, ms_to_ts, ts_to_ms, validate


def test_ts_roundtrip_known_value() -> None:
    # 2026-03-02T14:10:00Z = 20514 days * 86400 s + 14:10 → hand: 1772460600 s.
    assert ts_to_ms("2026-03-02T14:10:00.000Z") == 1_772_460_600_000
    assert ms_to_ts(1_772_460_600_123) == "2026-03-02T14:10:00.123Z"


def test_ts_offsets_are_normalised_to_utc() -> None:
    assert ts_to_ms("2026-03-02T11:10:00-03:00") == ts_to_ms("2026-03-02T14:10:00Z")


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-03-02T14:10:00", 12])
def test_bad_ts_is_a_record_error(bad: object) -> None:
    with pytest.raises(RecordError, match="ts"):
        ts_to_ms(bad)  # type: ignore[arg-type]


def test_validate_accepts_each_kind() -> None:
    ts = "2026-03-02T14:10:00.000Z"
    for rec in (
        make_record("speed", "ABC1D23", ts, kmh=80.5, odometer_m=1000, ignition=True),
        make_record("position", "ABC1D23", ts, lat=-23.5, lon=-46.6),
        make_record("driver", "ABC1D23", ts, slot=1, driver=None, activity="unknown"),
        make_record("door", "ABC1D23", ts, door=1, open=False, boarded=3, alighted=0),
        make_record("trip", "ABC1D23", ts, event="start", trip="T1", line="SP-0401", scheduled=ts),
        make_record("incident", "ABC1D23", ts, cause="breakdown", carrier_fault=True),
        make_record("report", "ABC1D23", ts, finding="abc", to="ARTESP"),
        make_record("device", "ABC1D23", ts, device="agent", status="clock_jump"),
    ):
        assert validate(rec) is rec


@pytest.mark.parametrize(
    ("rec", "message"),
    [
        ({"vehicle": "X", "ts": "2026-03-02T14:10:00Z", "kind": "warp"}, "kind"),
        ({"vehicle": "X", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": -1}, "kmh"),
        ({"vehicle": "X", "ts": "2026-03-02T14:10:00Z", "kind": "driver", "slot": 3,
          "driver": None, "activity": "rest"}, "slot"),
        ({"vehicle": "X", "ts": "2026-03-02T14:10:00Z", "kind": "position", "lat": "n/a",
          "lon": 0}, "lat"),
        ({"vehicle": "", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1}, "vehicle"),
        ({"vehicle": "X", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1,
          "agent": "a", "seq": 0}, "seq"),
        ([], "object"),
    ],
)
def test_validate_names_the_bad_field(rec: object, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        validate(rec)
