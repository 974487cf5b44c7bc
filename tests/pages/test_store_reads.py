"""What the pages read from the store, on SQLite and on PostgreSQL: speed samples with the number
read by the database, the events without the samples, the latest record of a kind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from collector.store import open_store, record_row
from protocols.records import ms_to_ts

T0 = 1_772_420_400_000  # 2026-03-02T03:00:00Z


def _rec(seq: int, at_ms: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"vehicle": "ABC1D23", "ts": ms_to_ts(T0 + at_ms), "kind": kind, "agent": "a1",
            "seq": seq, **fields}


@pytest.fixture
def filled(store_url: str) -> Iterator[Any]:
    store = open_store(store_url)
    recs = [
        _rec(1, 0, "speed", kmh=60.0),
        _rec(2, 0, "position", lat=-23.5, lon=-46.6, kmh=61.0),
        _rec(3, 1_000, "speed", kmh=0.0),
        _rec(4, 1_500, "driver", slot=1, driver="D-1", activity="drive"),
        _rec(5, 2_000, "speed", kmh=30.0),
        _rec(6, 100_000, "speed", kmh=50.0),
    ]
    store.put([record_row(r, T0) for r in recs])
    try:
        yield store
    finally:
        store.close()


def test_speeds_are_read_by_the_database(filled: Any) -> None:
    assert filled.speeds("ABC1D23", "speed", T0, T0 + 86_400_000) == [
        (T0, 60.0), (T0 + 1_000, 0.0), (T0 + 2_000, 30.0), (T0 + 100_000, 50.0)]
    assert filled.speeds("ABC1D23", "position", T0, T0 + 86_400_000) == [(T0, 61.0)]
    assert filled.speeds("ABC1D23", "speed", T0 + 200_000, T0 + 300_000) == []


def test_events_skip_the_samples(filled: Any) -> None:
    kinds = [text.split('"kind":"')[1].split('"')[0]
             for text in filled.events("ABC1D23", T0, T0 + 86_400_000)]
    assert kinds == ["driver"]
    latest = filled.latest("ABC1D23", "speed")
    assert latest is not None
    assert '"seq":6' in latest


def test_an_unknown_kind_is_refused(filled: Any) -> None:
    with pytest.raises(ValueError, match="only speed and position"):
        filled.speeds("ABC1D23", "door", T0, T0 + 1)
