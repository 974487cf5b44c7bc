"""The canonical form of a batch of records (protocols/canonical_batch.py) is, record by record,
exactly RFC 8785 over the normalized record (jcs(normalized(rec)))."""

from __future__ import annotations

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocols.canonical import jcs, normalized
from protocols.canonical_batch import OPTIONS, ready
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
def test_each_ready_record_is_written_as_rfc8785_writes_it(recs: list[dict[str, object]]) -> None:
    before = [dict(rec) for rec in recs]
    got = ready(recs)
    assert recs == before  # the records themselves are never changed
    assert len(got) == len(recs)
    for rec, prepared in zip(recs, got, strict=True):
        if prepared is None:
            continue  # canonical() decides (tests/test_canonical.py)
        try:
            written = orjson.dumps(prepared, option=OPTIONS)
        except orjson.JSONEncodeError:
            continue  # refused by orjson: canonical() decides
        assert written == _expected(rec)


def test_a_day_of_one_bus_goes_the_batch_way() -> None:
    from bench.busday import day_of_records

    recs = [{**rec, "agent": "a1", "seq": 1, "prev": "0" * 64}
            for _, rec in day_of_records(500)]
    got = ready(recs)
    assert all(prepared is not None for prepared in got)
    assert [orjson.dumps(p, option=OPTIONS) for p in got] == [_expected(r) for r in recs]
