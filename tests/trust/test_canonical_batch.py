"""The canonical form of a batch of records (protocols/canonical_batch.py) is, record by record,
exactly RFC 8785 over the normalized record (jcs(normalized(rec))), and leaves the records as
they were."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocols.canonical import jcs, normalized
from protocols.canonical_batch import forms
from protocols.fields import _canonical_ts_ms
from protocols.records import RecordError

_values = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-500, max_value=500)
    | st.sampled_from([0.0, -0.0, 1.0, 1e-6, 5e-6, -7e-6, 1e-5, 2.0**53, 2.0**60, 1e22,
                       9007199254740991.0, 123456.789, 4.9e-8])
    # values already at a documented precision (what the agent records): 7 and 2 decimals
    | st.integers(-(10**10), 10**10).map(lambda n: n / 10**7)
    | st.integers(-(10**6), 10**6).map(lambda n: n / 100)
    | st.text(max_size=8)
    | st.sampled_from(["2026-03-02T14:00:01.000Z", "2026-03-02T11:00:01-03:00",
                       "2026-02-30T14:00:01.000Z", "2026-03-02T14:00:01.123456Z"])
    | st.lists(st.integers(), max_size=2)
)
_keys = (st.text(max_size=6)
         | st.sampled_from(["ts", "scheduled", "incident_ts", "kmh", "lat", "lon", "course"]))
_records = st.builds(
    lambda kind, rest: {**rest, "kind": kind},
    st.sampled_from(["speed", "position", "door", None, 3]),
    st.dictionaries(_keys, _values, max_size=8),
)


def _expected(rec: dict[str, object]) -> bytes | None:
    try:
        return jcs(normalized(rec))
    except RecordError:
        return None


@settings(max_examples=1500, deadline=None)
@given(st.lists(_records, max_size=6))
@example([{"kind": "position", "lat": -23.5, "lon": -46.6252, "kmh": 75.93, "course": 1.0,
           "ts": "2026-03-02T14:00:01.000Z"},
          {"kind": "speed", "kmh": 0.0, "ts": "2026-03-02T14:00:01.000Z", "odometer_m": 22},
          {"kind": "speed", "kmh": float("nan"), "ts": "2026-03-02T14:00:01.000Z"}])
@example([{"kind": "position", "ts": "2026-03-02T14:00:01.000Z"}, {"é": 1}])
def test_each_record_is_written_as_rfc8785_writes_it(recs: list[dict[str, object]]) -> None:
    _check(recs)


def _check(recs: list[dict[str, object]]) -> list[bytes | None]:
    before = [dict(rec) for rec in recs]
    kept = [list(map(id, rec.values())) for rec in recs]
    got = forms(recs)
    # the records themselves are left as they were: same values, the same objects
    assert recs == before
    assert [list(map(id, rec.values())) for rec in recs] == kept
    assert len(got) == len(recs)
    for rec, written in zip(recs, got, strict=True):
        if written is not None:  # None: canonical() decides (tests/test_canonical.py)
            assert written == _expected(rec)
    return got


# Batches that take each way of the column checks: whole doubles (written as integers), doubles
# off their precision, several kinds sharing a field with and without a precision, a double in
# [1e-6, 1e-5) or beyond 2**53 among good ones, timestamps of another offset, an invalid day, a
# newline inside, and fields only some records have.
_T = "2026-03-02T14:00:01.000Z"


@given(st.lists(st.sampled_from([
    {"kind": "speed", "ts": _T, "kmh": 61.0, "odometer_m": 5},
    {"kind": "speed", "ts": _T, "kmh": 61.25},
    {"kind": "speed", "ts": _T, "kmh": 61.257},
    {"kind": "speed", "ts": _T, "kmh": -0.0},
    {"kind": "speed", "ts": "2026-03-02T11:00:01-03:00", "kmh": 1.5},
    {"kind": "speed", "ts": "2026-02-30T14:00:01.000Z", "kmh": 1.5},
    {"kind": "speed", "ts": "2026-03-02T14:00:01.000Z\n2026-03-02T14:00:01.000Z"[:24]},
    {"kind": "speed", "ts": "2026-03-02T14:00:0\n.000Z"},
    {"kind": "speed", "ts": "1969-12-31T23:59:59.999Z"},
    {"kind": "speed", "ts": "2101-01-01T00:00:00.000Z"},
    {"kind": "speed", "ts": "2100-12-31T23:59:59.999Z", "kmh": 0.5},
    {"kind": "speed", "ts": "2028-02-29T10:00:00.000Z", "kmh": 3.0},
    {"kind": "speed", "ts": "2027-02-29T10:00:00.000Z"},
    {"kind": "speed", "ts": "2026-04-31T10:00:00.000Z"},
    {"kind": "speed", "ts": 1772460000000},
    {"kind": "speed", "ts": "2026-03-02T24:00:01.000Z"},
    {"kind": "speed", "ts": None, "kmh": 2e6 + 0.5},
    {"kind": "position", "ts": _T, "lat": -23.5000001, "lon": -46.62, "kmh": 74.08,
     "course": 90.0},
    {"kind": "position", "ts": _T, "lat": 0.000001, "lon": 5e-6, "course": 359.99},
    {"kind": "position", "ts": _T, "lat": -23.50000012, "lon": 1e-7, "course": 360.0},
    {"kind": "position", "ts": _T, "lat": -23.5, "lon": -46, "kmh": 70, "course": None},
    {"kind": "position", "ts": _T, "lat": -23.25, "lon": -46.5, "kmh": "70", "course": True},
    {"kind": "position", "ts": _T, "lat": 2**70, "lon": -46.5, "kmh": 2e-6},
    {"kind": "position", "ts": _T, "lat": float("nan"), "lon": float("-inf"), "kmh": 1e300},
    {"kind": "door", "ts": _T, "kmh": 61.0, "x": 2.0**53, "y": 3.0},
    {"kind": "door", "ts": _T, "kmh": 1e-6, "x": 2.5, "scheduled": _T},
    {"kind": "door", "ts": _T, "x": 9007199254740991.0, "incident_ts": "2026-03-02"},
    {"kind": "trip", "x": float("inf"), "y": 1e-5},
    {"kind": "trip", "y": float("nan"), "z": 2**60},
    {"kind": "trip", "z": "\ud800", "w": 0.5},
]), max_size=12))
@settings(max_examples=400, deadline=None)
def test_batches_that_take_each_way(recs: list[dict[str, object]]) -> None:
    _check([dict(rec) for rec in recs])


def test_whole_doubles_are_written_as_integers_and_given_back() -> None:
    recs: list[dict[str, object]] = [
        {"kind": "speed", "ts": _T, "kmh": 61.0, "seq": 1},
        {"kind": "position", "ts": _T, "lat": -23.5, "lon": -46.0, "kmh": 0.0, "course": 90.0},
    ]
    got = _check(recs)
    assert got[0] == b'{"kind":"speed","kmh":61,"seq":1,"ts":"2026-03-02T14:00:01.000Z"}'
    assert got[1] == (b'{"course":90,"kind":"position","kmh":0,"lat":-23.5,"lon":-46,'
                      b'"ts":"2026-03-02T14:00:01.000Z"}')
    assert type(recs[0]["kmh"]) is float
    assert [type(recs[1][key]) for key in ("lat", "lon", "kmh", "course")] == [float] * 4


def test_one_odd_value_leaves_only_its_record() -> None:
    good = {"kind": "speed", "ts": _T, "kmh": 61.5}
    recs: list[dict[str, object]] = [dict(good), {**good, "x": 1e-6}, dict(good),
                                     {**good, "ts": "2026-03-02T11:00:01-03:00"},
                                     {**good, "z": 2**60}, dict(good)]
    got = _check(recs)
    assert [g is None for g in got] == [False, True, False, True, True, False]


def test_a_day_of_one_bus_goes_the_batch_way() -> None:
    from bench.busday import day_of_records

    recs = [{**rec, "agent": "a1", "seq": 1, "prev": "0" * 64}
            for _, rec in day_of_records(500)]
    got = forms(recs)
    assert all(written is not None for written in got)
    assert got == [_expected(r) for r in recs]


@settings(max_examples=500, deadline=None)
@given(st.lists(_records, max_size=6))
def test_times_the_caller_checked_are_not_checked_again_and_change_nothing(
        recs: list[dict[str, object]]) -> None:
    """``known_times`` (the agent's commit: every split record's ``ts`` was read by
    ``_canonical_ts_ms``): on records whose ``ts`` is canonical, or absent, the forms are those
    without it — each one JCS of the normalized record."""
    kept = [rec for rec in recs
            if "ts" not in rec or (type(rec["ts"]) is str and _canonical_ts_ms(rec["ts"]) is not None)]
    assert forms(kept, known_times={"ts"}) == _check(kept)


def test_a_batch_of_more_distinct_times_than_are_checked_one_by_one() -> None:
    """Past 1,024 distinct values of a timestamp field, a batch checks them by one pattern match
    (protocols/canonical_batch.py, ``_times``), the way under it by value: both give each
    record's own form, and a value that is not canonical (an offset, a day February never has,
    a number) leaves its record alone to canonical()."""
    from protocols.records import ms_to_ts

    base = 1_772_460_000_000
    for count in (1_000, 1_100):  # under and over the bound
        recs: list[dict[str, object]] = [
            {"kind": "speed", "kmh": 40.5, "ts": ms_to_ts(base + i * 1000)} for i in range(count)]
        recs[7]["ts"] = "2026-03-02T11:00:01-03:00"
        recs[8]["ts"] = "2027-02-29T14:00:01.000Z"
        recs[9]["ts"] = 1_772_460_000
        got = _check(recs)
        assert [got[7], got[8], got[9]] == [None, None, None]
        assert got[10] == b'{"kind":"speed","kmh":40.5,"ts":"' + ms_to_ts(base + 10_000).encode() \
            + b'"}'
        assert all(form is not None for i, form in enumerate(got) if i not in (7, 8, 9))


@settings(max_examples=800, deadline=None)
@given(st.lists(_records, max_size=6))
def test_texts_say_which_forms_hold_another_number_than_their_record(
        recs: list[dict[str, object]]) -> None:
    """``texts`` (what the collector keeps as the record, collector/intake.py): each form as
    text, and in ``rounded`` exactly the records whose form, read back, is not the record — a
    double rounded to its precision; a whole double written as its integer is the same
    number."""
    import orjson

    from protocols.canonical_batch import texts

    rounded: list[int] = []
    got = texts(recs, (), rounded)
    assert [None if t is None else t.encode() for t in got] == forms(recs)
    for i, (rec, text) in enumerate(zip(recs, got, strict=True)):
        if text is not None:
            assert (i in rounded) == (orjson.loads(text) != rec), (rec, text)
