"""The record: timestamps, vehicle ids and validation (docs/records.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.records import (
    MAX_SAFE_INT,
    MAX_TS_MS,
    MIN_TS_MS,
    RecordError,
    _fast_ts_ms,
    _full_check,
    is_vehicle_id,
    make_record,
    ms_to_ts,
    ts_to_ms,
    validate,
    validated_ts_ms,
)


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


# --- timestamps: one parser, one formatter ----------------------------------------------------


@pytest.mark.parametrize(
    ("ts", "ms"),
    [
        ("1970-01-01T00:00:00.000Z", 0),
        # 2000-03-01T00:00:00Z is 11017 days after 1970-01-01 (30 years, 7 of them leap:
        # 10957 days to 2000-01-01, then 31 + 29): 11017 * 86,400,000 - 1 ms.
        ("2000-02-29T23:59:59.999Z", 951_868_799_999),
        ("2000-03-01T00:00:00.000+00:00", 951_868_800_000),
        ("2000-02-29T21:00:00-03:00", 951_868_800_000),
        ("2000-02-29T21:00:00.0009-03:00", 951_868_800_000),  # below the ms: truncated
    ],
)
def test_ts_to_ms_by_hand(ts: str, ms: int) -> None:
    assert ts_to_ms(ts) == ms


@pytest.mark.parametrize(
    "ts",
    [
        "2026-02-29T00:00:00.000Z",  # 2026 is not a leap year
        "2026-03-02T24:00:00.000Z",
        "2026-03-02T14:60:00.000Z",
        "2026-03-02T14:10:60.000Z",  # no leap seconds
        "２026-03-02T14:10:00.000Z",  # a full-width digit
        "2026-03-02T14:10:00.000",
    ],
)
def test_canonical_looking_but_invalid_ts_is_refused(ts: str) -> None:
    with pytest.raises(RecordError, match="ts"):
        ts_to_ms(ts)


def test_ms_to_ts_by_hand() -> None:
    assert ms_to_ts(0) == "1970-01-01T00:00:00.000Z"
    assert ms_to_ts(951_868_799_999) == "2000-02-29T23:59:59.999Z"
    assert ms_to_ts(-1) == "1969-12-31T23:59:59.999Z"
    assert ms_to_ts(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"


@given(st.integers(-62_135_596_800_000, 253_402_300_799_999))
def test_ms_to_ts_is_the_datetime_rendering(ms: int) -> None:
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    assert ms_to_ts(ms) == dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@given(st.integers(MIN_TS_MS, MAX_TS_MS))
def test_ts_to_ms_inverts_ms_to_ts_over_the_range_records_may_carry(ms: int) -> None:
    assert ts_to_ms(ms_to_ts(ms)) == ms


@pytest.mark.parametrize(
    "ts",
    [
        "9999-12-31T23:59:59-23:59",  # 10000-01-01T23:58:59Z
        "0001-01-01T00:00:00+14:00",  # 0000-12-31T10:00:00Z
        "1969-12-31T23:59:59.999Z",
        "1970-01-01T00:00:00+01:00",  # 1969-12-31T23:00:00Z
        "2101-01-01T00:00:00.000Z",
    ],
)
def test_times_outside_1970_to_2100_are_refused(ts: str) -> None:
    with pytest.raises(RecordError, match="outside 1970-2100"):
        ts_to_ms(ts)


def test_the_range_ends_by_hand() -> None:
    # 2101-01-01 is 131 years after 1970-01-01, 32 of them leap (1972 … 2096; 2100 is not):
    # 131 * 365 + 32 = 47,847 days = 4,133,980,800,000 ms.
    assert ts_to_ms("2100-12-31T23:59:59.999Z") == MAX_TS_MS == 4_133_980_799_999
    assert ts_to_ms("1970-01-01T00:00:00.000Z") == MIN_TS_MS == 0


def test_ms_to_ts_writes_any_value_a_store_may_hold() -> None:
    # 10000-01-01 is 2,932,897 days after 1970-01-01 (datetime stops at 9999-12-31, day
    # 2,932,896): 253,402,300,800,000 ms; ISO 8601's expanded form carries a sign.
    assert ms_to_ts(253_402_300_800_000) == "+10000-01-01T00:00:00.000Z"
    # 0001-01-01T00:00:00Z is -62,135,596,800,000 ms; 14 h before it is in year 0.
    assert ms_to_ts(-62_135_596_800_000 - 14 * 3_600_000) == "0000-12-31T10:00:00.000Z"
    # year 0 is a leap year (366 days) and the year before it is -1.
    assert ms_to_ts(-62_135_596_800_000 - 367 * 86_400_000) == "-00001-12-31T00:00:00.000Z"


# --- vehicle ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("vehicle", ["ABC1D23", "a", "9.b-c_d", "X" * 64])
def test_vehicle_ids(vehicle: str) -> None:
    assert is_vehicle_id(vehicle)
    validate({"vehicle": vehicle, "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1})


@pytest.mark.parametrize(
    "vehicle", ["", ".", "..", "-x", "_x", "a/b", "a b", "a+", "a#", "ABC\n", "X" * 65, "çà", 7]
)
def test_not_vehicle_ids(vehicle: object) -> None:
    assert not is_vehicle_id(vehicle)
    with pytest.raises(RecordError, match="vehicle"):
        validate({"vehicle": vehicle, "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1})


def test_integers_are_bounded_by_what_a_json_number_holds_exactly() -> None:
    rec = {"vehicle": "V", "ts": "2026-03-02T14:10:00Z", "kind": "speed", "kmh": 1, "agent": "a"}
    validate({**rec, "seq": MAX_SAFE_INT, "device_seq": MAX_SAFE_INT, "odometer_m": MAX_SAFE_INT})
    for key in ("seq", "device_seq", "odometer_m"):
        with pytest.raises(RecordError, match=key):
            validate({**rec, "seq": 1, key: MAX_SAFE_INT + 1})


# --- one validator: the inline pass never accepts what the full checks refuse -------------------

_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.integers(MAX_SAFE_INT - 1, MAX_SAFE_INT + 1),
    st.floats(-500, 2500), st.sampled_from([float("nan"), float("inf"), -0.0, 400.0, 400.01]),
    st.text(max_size=3), st.sampled_from(["2026-03-02T14:10:00.000Z", "2026-03-02T14:10:00Z",
                                          "2026-13-02T14:10:00.000Z", "V", "0a", "zz",
                                          "aa5529", "aa 55", "a", "aa55\n"]),
)
_KEYS = st.sampled_from(["vehicle", "ts", "kind", "agent", "seq", "device_seq", "raw", "kmh",
                         "odometer_m", "ignition", "lat", "lon", "course"])


@given(
    kind=st.sampled_from(["speed", "position"]),
    changes=st.dictionaries(_KEYS, _VALUES, max_size=3),
    drop=st.lists(_KEYS, max_size=2),
)
def test_the_inline_pass_agrees_with_the_full_checks(
    kind: str, changes: dict[str, object], drop: list[str]
) -> None:
    rec: dict[str, object] = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:10:00.000Z",
                              "kind": kind, "agent": "a1", "seq": 5}
    rec.update({"kmh": 50.5, "odometer_m": 10} if kind == "speed" else {"lat": -23.5, "lon": -46.6})
    rec.update(changes)
    for key in drop:
        rec.pop(key, None)
    fast = _fast_ts_ms(rec)
    try:
        full: int | None = _full_check(rec)
    except RecordError:
        full = None
    if fast is not None:
        assert fast == full, rec
    assert validated_ts_ms(rec) == full if full is not None else True


@pytest.mark.parametrize("name", ["..", ".", "ABC1D23\n", "a/b", "-x"])
def test_provisioning_takes_the_same_vehicle_ids(name: str) -> None:
    # DIR/vehicles/ID/ is a folder: ".." would leave DIR (the pattern was a copy, matched with $)
    from frota.provision.fleet import ProvisionError, _check_name

    with pytest.raises(ProvisionError, match="must be 1-64"):
        _check_name("vehicle", name)
