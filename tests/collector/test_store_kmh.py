"""The ``kmh`` column of ``records`` (migration 022_records_kmh): the sample's km/h kept at
insert, the same number the record's JSON holds, on new rows, on rows migrated from a store made
before it, and on a compacted day's rows turned back into rows."""

from __future__ import annotations

from typing import Any

import pytest

from collector import speed_minutes
from collector.store import RECORD_COLUMNS, Store, open_store, record_row
from tests.collector.helpers import T0, speed

V1 = "ABC1D23"


def _position(seq: int, at_s: int, **extra: Any) -> dict[str, Any]:
    rec = speed(V1, "a1", seq, at_s=at_s, lat=-23.5, lon=-46.6)
    rec["kind"] = "position"
    del rec["kmh"]
    return {**rec, **extra}


def _records() -> list[dict[str, Any]]:
    """Speed samples with an int and a float km/h, positions with and without one, an event."""
    return [
        speed(V1, "a1", 1, at_s=1, kmh=42),
        speed(V1, "a1", 2, at_s=2, kmh=87.5),
        speed(V1, "a1", 3, at_s=3, kmh=0),
        _position(4, 4, kmh=1234.25),
        _position(5, 5),
        {**speed(V1, "a1", 6, at_s=6), "kind": "door", "door": 1, "open": True},
    ]


# what each record's row must hold in kmh, by hand from _records
EXPECTED = [(1, 42.0), (2, 87.5), (3, 0.0), (4, 1234.25), (5, None), (6, None)]


def _kmh_and_json(store: Store) -> list[tuple[int, Any, Any]]:
    """(seq, kmh column, the JSON's kmh as the database reads it) of every row, by seq."""
    number = store._number("kmh")
    return [(int(seq), kmh, None if v is None else float(v)) for seq, kmh, v in store._read(
        f"SELECT seq, kmh, CASE WHEN kind IN ('speed', 'position') THEN {number} END "
        "FROM records ORDER BY seq")]


def test_row_kmh_is_the_samples_number_as_a_float() -> None:
    assert [speed_minutes.row_kmh(r) for r in _records()] == [v for _, v in EXPECTED]
    assert type(speed_minutes.row_kmh(_records()[0])) is float
    # record_row inlines it
    assert [record_row(r, T0)[13] for r in _records()] == [v for _, v in EXPECTED]
    assert type(record_row(_records()[0], T0)[13]) is float


def test_new_rows_keep_the_kmh_their_json_holds(store: Store) -> None:
    assert store.put([record_row(r, T0) for r in _records()]) == 6
    got = _kmh_and_json(store)
    assert [(seq, kmh) for seq, kmh, _ in got] == EXPECTED
    assert all(kmh == number for _, kmh, number in got)
    assert store.speed_columns(V1, "speed", 0, 1 << 62) == (
        [T0 + 1000, T0 + 2000, T0 + 3000], [42.0, 87.5, 0.0])
    assert store.speed_columns(V1, "position", 0, 1 << 62) == ([T0 + 4000], [1234.25])


def test_a_store_from_before_022_gets_kmh_from_its_rows_json(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import collector.store_pg
    import collector.store_sqlite
    from collector.store_schema import MIGRATIONS

    before = [m.name for m in MIGRATIONS].index("022_records_kmh")
    for module in (collector.store_sqlite, collector.store_pg):
        monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS[:before])
    older = open_store(store_url)
    try:
        columns = RECORD_COLUMNS[:13]   # the columns records had then
        assert "kmh" not in columns
        older.apply([(f"INSERT INTO records ({', '.join(columns)}) VALUES "
                      f"({', '.join('?' * len(columns))})",
                      [record_row(r, T0)[:13] for r in _records()])])
    finally:
        older.close()
    monkeypatch.undo()
    store = open_store(store_url)
    try:
        got = _kmh_and_json(store)
        assert [(seq, kmh) for seq, kmh, _ in got] == EXPECTED
        assert store.speed_columns(V1, "speed", 0, 1 << 62) == (
            [T0 + 1000, T0 + 2000, T0 + 3000], [42.0, 87.5, 0.0])
        # new rows after the migration go through the same column
        assert store.put([record_row(speed(V1, "a1", 7, at_s=7, kmh=12.25), T0)]) == 1
        assert store.speed_columns(V1, "speed", T0 + 7000, T0 + 8000) == ([T0 + 7000], [12.25])
    finally:
        store.close()
